"""Notifications when a person is needed (design.md "Notifications"), sent through Apprise.

config.py reads `[notify]`; messages.py writes each event's text (hostile text made harmless);
delivery.py sends one message to one URL; timing.py holds quiet hours and digests; outbox.py keeps the
notifications in the store (one row per event and URL, claimed by one daemon); follower.py is the
background thread that turns events into rows and rows into messages, never blocking a run.
"""
