"""The muactl app and the one error wrapper every command goes through (`command`, `guarded`)."""

from __future__ import annotations

import functools
import sys

import typer

from ..errors import MuactlError

class App(typer.Typer):
    def __call__(self, *args, **kwargs):
        """The console command. After Ctrl-C (exit 130) it leaves at once: what finished is stored, and the
        threads still loading or running a model would otherwise hold the exit until they end."""
        import os

        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as e:
            if e.code == 130:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(130)
            raise


app = App(
    name="muactl",
    help="Train tool-using LLM agents with RL against simulated users, on domains declared in YAML.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def guarded(fn):
    """Wrap a command so bad input is one line and exit 2 (MuactlError, or an OSError on a path the
    user named), Ctrl-C is exit 130, and a bug in muactl is one line with exit 1, never a traceback."""

    @functools.wraps(fn)
    def inner(*a, **kw):
        import os

        try:
            return fn(*a, **kw)
        except MuactlError as e:
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except (typer.Exit, typer.Abort):
            raise
        except BrokenPipeError:  # `muactl tools retail | head`: the reader left; exit quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0)
        except OSError as e:
            if os.environ.get("MUACTL_DEBUG"):
                raise
            if e.filename is None:
                fail(f"internal error: {type(e).__name__}: {e} (set MUACTL_DEBUG=1 for the traceback and please report it)", 1)
            # a file the user named (an output path in an unwritable place, a missing folder...)
            fail(f"{e.filename}: {e.strerror or e}")
        except Exception as e:  # a bug in muactl: one line for the user, the traceback on request
            if os.environ.get("MUACTL_DEBUG"):
                raise
            fail(f"internal error: {type(e).__name__}: {e} (set MUACTL_DEBUG=1 for the traceback and please report it)", 1)

    return inner


def command(*args, group: typer.Typer | None = None, **kwargs):
    """`group.command` (the top-level app by default) with every command behind `guarded`."""

    def wrap(fn):
        return (group or app).command(*args, **kwargs)(guarded(fn))

    return wrap


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"muactl {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                      help="Print the version and exit.")) -> None:
    pass
