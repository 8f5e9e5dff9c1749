"""One picklable exception hierarchy for rlstream.

Every error carries a message that says what happened and what to do about it.
Exceptions cross Ray process boundaries, so they keep only plain arguments.
"""

from __future__ import annotations


class RlstreamError(Exception):
    """Base class of every error rlstream raises on purpose."""


class ConfigError(RlstreamError):
    """A command-line option, rules file or storage option is invalid."""


class StorageError(RlstreamError):
    """Reading or writing a path failed in a way a retry will not fix."""


class CheckpointError(RlstreamError):
    """A resume state under the output folder cannot be read or belongs to other inputs."""
