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


class UnsafeFile(StorageError):
    """A path under a ROOT that rlstream will not open: a symbolic link (its target may
    lie outside every ROOT) or a special file (FIFO, socket, device). Carries the path
    and the reason only, never any of the file's bytes."""

    code = "unsafe_file"
    """The quarantine reason of a file refused so."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"not opened: {self.reason}"


class FileTooLarge(UnsafeFile):
    """A whole file (a transcript, a per-step file, run.json) larger than the per-file
    limit (`--max-file-bytes`): refused before any byte of it is read."""

    code = "file_too_large"

    def __str__(self) -> str:
        return f"not read: {self.reason}"


class CheckpointError(RlstreamError):
    """A resume state under the output folder cannot be read or belongs to other inputs."""


class InputError(ConfigError):
    """A path named on the command line does not exist, cannot be read, or is not what
    the command needs (a ROOT folder, an rlstream OUT). The command stops before it
    starts anything (no Ray) and exits with status 2, as for any usage error."""


class ClusterError(ConfigError):
    """The Ray cluster named by `--ray-address` or RAY_ADDRESS cannot be reached or
    joined. Nothing is started; exit status 2, as for a path that cannot be read."""


class NoDataError(RlstreamError):
    """The inputs are valid but hold nothing to work on (no runs under the ROOTs, none
    in OUT). Exit status 1."""


EXIT_OK = 0
EXIT_FAILURE = 1
"""Nothing to work on, or the work failed (`NoDataError`, any other `RlstreamError`)."""
EXIT_USAGE = 2
"""Bad command line: an option, or a path (`ConfigError`, `InputError`, argparse)."""
EXIT_REJECTED = 3
"""`analyze`/`watch` wrote their tables but some runs could not be read (rejected into
the quarantine table)."""


def exit_code(error: RlstreamError) -> int:
    """The process exit status for an error that stops a command."""
    return EXIT_USAGE if isinstance(error, ConfigError) else EXIT_FAILURE
