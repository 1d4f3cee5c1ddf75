"""The docs stay true: the reference is what the live server offers, and no link leaves the repository."""

from __future__ import annotations

import re
from pathlib import Path

from agentqueue.server.reference import render

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and <scheme://…> autolinks; code spans are stripped first, so commands may show URLs.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)|<([a-z][a-z0-9+.-]*:[^>\s]+)>")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def test_the_reference_is_generated_from_the_live_server() -> None:
    current = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert current == render(), \
        "docs/reference.md is stale: run `python -m agentqueue.server.reference` from the repo root"


def test_the_reference_lists_every_resource_including_logs_and_notes() -> None:
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    for uri in ("agentqueue://tasks/{task_id}/log{?offset}", "agentqueue://projects/{project_id}/notes/{name}",
                "agentqueue://approvals", "agentqueue://status"):
        assert f"`{uri}`" in text, uri


def test_no_link_in_the_readme_or_docs_points_outside_the_repository() -> None:
    problems = []
    for doc in DOCS:
        text = CODE.sub("", doc.read_text(encoding="utf-8"))
        for match in LINK.finditer(text):
            target = match.group(1) or match.group(2)
            if re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#"):
                problems.append(f"{doc.name}: {target} (outside the repository)")
                continue
            path = (doc.parent / target.split("#")[0]).resolve() if target.split("#")[0] else doc
            if not path.is_relative_to(ROOT):
                problems.append(f"{doc.name}: {target} (outside the repository)")
            elif not path.exists():
                problems.append(f"{doc.name}: {target} (no such file)")
    assert not problems, problems


def test_the_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", readme.split("## Add it to your client")[0], re.S)
    assert len(blocks) == 2, "the Quick start has two commands: install-and-start, and the tests"
    assert blocks[1].strip() == ".ci/run"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1].endswith(".venv/bin/python -m pytest") and "pip install" in ci[-1]


def _readme_toml(marker: str) -> str:
    """The README's ```toml block whose first line is `marker`."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    return next(block for block in re.findall(r"```toml\n(.*?)```", readme, re.S) if block.startswith(marker))


def test_the_readmes_policy_and_roots_examples_are_what_agentqueue_reads(tmp_path: Path) -> None:
    """Issue 23: policy.toml's syntax and `[files] roots` are documented with examples; each one is read by the
    real parsers and decides as the README says."""
    from agentqueue import settings
    from agentqueue.services.policy import Policies
    from agentqueue.services.policy_rules import Action

    (tmp_path / "policy.toml").write_text(_readme_toml("# $AGENTQUEUE_HOME/policy.toml"))
    policies = Policies(tmp_path)
    everywhere, web = policies.effective(None), policies.effective("web-app")
    assert everywhere.preset.name == "standard" and web.preset.name == "autonomous"
    assert everywhere.ask_timeout == 7200
    assert everywhere.decide(Action("Bash", "npm test -- --watch")).decision == "allow"
    assert everywhere.decide(Action("Bash", "npm test && rm -rf /")).decision == "deny"  # each simple command
    assert everywhere.decide(Action("Bash", "git push origin main")).decision == "ask"
    assert web.decide(Action("Bash", "rm -rf build")).decision == "deny"  # the global deny holds in the project
    assert web.decide(Action("Bash", "docker compose up")).decision == "allow"

    (tmp_path / "config.toml").write_text(_readme_toml("# $AGENTQUEUE_HOME/config.toml\n[files]"))
    assert settings.load(tmp_path, environ={}).roots == [Path("~/code").expanduser(), Path("/srv/repos")]
