"""Reinforcement learning with fast-weight policies (SRWM paper §4.3): V-trace, environments, agents.

Its own floor above ``layers`` / ``models``: nothing below imports it. Optional environment packages
(``minigrid``, ``procgen2``) are imported only when an environment of theirs is built.
"""
