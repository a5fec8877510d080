"""fastweights: learned learning algorithms (SRWM, fast-weight programmers, TTT) and the ACL pipeline."""

__version__ = "0.1.0"
