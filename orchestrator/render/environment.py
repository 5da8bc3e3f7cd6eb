"""The Jinja2 environment host templates render in.

Sandboxed (a site template cannot reach Python internals) and strict (an undefined variable is
an error, not an empty string). Site template directories are searched before the built-in
``templates/``; within each directory ``<template name>/<file>`` is tried before ``<file>`` so a
site can override one file for one host template only.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from jinja2 import ChoiceLoader, FileSystemLoader, StrictUndefined, TemplateError, TemplateNotFound
from jinja2.sandbox import SandboxedEnvironment

from orchestrator.errors import ConfigError

# What a template's own expressions can raise beyond Jinja's errors (``{{ 1/0 }}``, ``{{ 1 + "a" }}``,
# a macro or include calling itself): the template's fault, so a line naming it, not an internal error.
TEMPLATE_CODE_ERRORS = (ArithmeticError, LookupError, TypeError, ValueError, RecursionError)


class TemplateRenderer:
    """Renders named template files with site directories searched first."""

    def __init__(self, search_path: Sequence[Path]) -> None:
        self.search_path = [Path(p) for p in search_path]
        self.env = _environment(tuple(str(p) for p in self.search_path))

    def render(self, filename: str, host_template: str, context: dict[str, object]) -> str:
        """Render ``filename`` (per-template override first); errors name the file and the problem."""
        try:
            template = self.env.get_or_select_template([f"{host_template}/{filename}", filename])
        except TemplateNotFound:
            where = ", ".join(str(p) for p in self.search_path)
            raise ConfigError([f"{filename}: template not found (searched {where})"]) from None
        except TemplateError as exc:
            raise ConfigError([f"{_where(exc, filename)}: {exc.message}"]) from None
        except (OSError, UnicodeDecodeError) as exc:  # unreadable, or not UTF-8
            raise ConfigError([f"{getattr(exc, 'filename', None) or filename}: cannot read: {exc}"]) from None
        try:
            return template.render(context)
        except TemplateError as exc:
            return_name = template.filename or filename
            raise ConfigError(
                [f"{_where(exc, return_name)}: {exc.message} (rendering host template {host_template!r})"]
            ) from None
        except TEMPLATE_CODE_ERRORS as exc:
            where = _line_in(exc, template.filename or filename)
            raise ConfigError([f"{where}: {_code_problem(exc)} (rendering host template {host_template!r})"]) from None

    def render_string(self, source: str, context: dict[str, object], what: str) -> str:
        """Render a short template string from the configuration (``what`` names its key)."""
        try:
            return self.env.from_string(source).render(context)
        except TemplateError as exc:
            raise ConfigError([f"{what}: {exc.message}"]) from None
        except TEMPLATE_CODE_ERRORS as exc:
            raise ConfigError([f"{what}: {_code_problem(exc)}"]) from None


@functools.lru_cache(maxsize=16)
def _environment(search_path: tuple[str, ...]) -> SandboxedEnvironment:
    """The environment of one search path, made once: its compiled templates are kept between
    renders (a create renders several files per op; compiling them again each time cost more
    than the rest of the render). A template file changed on disk is compiled again at its next
    use (Jinja checks each file's modification time, ``auto_reload``)."""
    return SandboxedEnvironment(
        loader=ChoiceLoader([FileSystemLoader(p) for p in search_path]),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=True,
    )


def _code_problem(exc: BaseException) -> str:
    return "recursion too deep" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"


def _line_in(exc: BaseException, filename: str) -> str:
    """``filename:line`` of the innermost frame of the template where ``exc`` was raised (Jinja maps
    its frames to template lines), or ``filename`` alone."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"{filename}:{line}" if line else filename


def _where(exc: TemplateError, fallback: str) -> str:
    name = getattr(exc, "filename", None) or fallback
    line = getattr(exc, "lineno", None)
    return f"{name}:{line}" if line else str(name)
