"""Ids: kebab-case slugs for named things, adjective-noun words for tasks."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from .errors import InvalidInputError

_ADJECTIVES = (
    "amber agile bold brave brisk calm clever cosmic crisp daring deft eager early fair fast "
    "fierce gentle glad golden grand happy hardy humble jolly keen kind lively loyal lucky "
    "mellow merry mighty misty noble proud quick quiet rapid ready rosy rustic sharp shiny "
    "silent silver sleek smart snowy solid steady stout sunny swift tidy vivid warm wild wise witty young zesty"
).split()
_NOUNS = (
    "badger bear beaver bison cedar comet condor crane dolphin eagle falcon ferret finch fox "
    "gecko heron ibis jaguar koala lark lemur lion lynx maple marten meadow moose newt oak "
    "orca otter owl panda pine puffin quail raven river robin salmon seal sparrow spruce "
    "stork swan tiger trout tulip viper walrus willow wolf wren yak zebra"
).split()


def slugify(name: str, *, what: str = "name") -> str:
    """`My Project!` -> `my-project`; refuses names with no letters or digits."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    if not slug:
        raise InvalidInputError(
            f"The {what} {name!r} has no letters or digits to make an id from. Give a {what} like 'My Project'."
        )
    return slug[:64].rstrip("-")


TIERS = (0, 20, 60, 100)  # the attempt at which ids get no suffix, two digits, four, six


def _candidate(attempt: int, rng: random.Random) -> str:
    candidate = f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
    if attempt >= TIERS[1]:
        digits = 2 if attempt < TIERS[2] else 4 if attempt < TIERS[3] else 6
        candidate += f"-{rng.randint(10 ** (digits - 1), 10 ** digits - 1)}"
    return candidate


def _first_free(exists: Callable[[str], bool], rng: random.Random, start: int) -> tuple[str, int]:
    for attempt in range(start, 200):
        candidate = _candidate(attempt, rng)
        if not exists(candidate):
            return candidate, attempt
    raise RuntimeError("could not find a free task id after 200 attempts")


def new_task_id(exists: Callable[[str], bool], rng: random.Random | None = None) -> str:
    """A fresh `adjective-noun` id; after 20 collisions a two-digit suffix is added, after 60 four digits, after 100
    six: the ~3,700 words pairs and 90 two-digit suffixes fill up at a few hundred thousand tasks, six digits never."""
    return _first_free(exists, rng or random.Random(), 0)[0]


class TaskIds:
    """Fresh task ids for one store, each search starting at the length the last id needed: past a few thousand
    tasks every bare word pair is taken, and checking twenty of them per new task cost more than the insert."""

    def __init__(self, exists: Callable[[str], bool]) -> None:
        self.exists = exists
        self.start = 0

    def new(self, rng: random.Random | None = None) -> str:
        task_id, attempt = _first_free(self.exists, rng or random.Random(), self.start)
        self.start = max(tier for tier in TIERS if tier <= attempt)
        return task_id
