"""The base of every configuration section: strict keys, plain finite values."""

from __future__ import annotations

import datetime
import typing

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from orchestrator.model.values import scalar_problem, value_problems

# What the YAML loader can produce besides mappings and lists (sets from !!set).
_YAML_SCALARS = (str, int, float, datetime.date, bytes, set, frozenset)


class Strict(BaseModel):
    """Base of every configuration section: unknown keys are errors, values are not coerced loosely.

    Every value is plain and finite before its field sees it (``orchestrator.model.values``):
    no NaN or infinity (``allow_inf_nan`` for the typed numbers, ``_plain`` for all), no integer
    out of range, no date, and no boolean where a number belongs (pydantic would take ``true``
    as 1).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _plain(cls, value: object, info: ValidationInfo) -> object:
        annotation = cls.model_fields[info.field_name].annotation if info.field_name else None
        if isinstance(value, dict | list):
            # Sections are checked by their own models; free-form values (module settings,
            # template variables, tags) are walked here.
            problems = [] if _holds_section(annotation) else value_problems(value)
            if problems:
                raise ValueError("; ".join(f"{where}: {what}" for where, what in problems))
            return value
        # Only what YAML can produce is judged here: a value built in code (a Path, a section
        # model) is the field's own business, as before.
        if isinstance(value, _YAML_SCALARS) and (problem := scalar_problem(value)) is not None:
            raise ValueError(problem)
        if isinstance(value, bool) and _is_number(annotation):
            raise ValueError("a boolean (true/false) is not a number")
        return value


def _holds_section(annotation: object) -> bool:
    """Whether a field's type contains a configuration section (a model validating its own values)."""
    if isinstance(annotation, type):
        return issubclass(annotation, BaseModel)
    return any(_holds_section(arg) for arg in typing.get_args(annotation))


def _is_number(annotation: object) -> bool:
    """Whether a field's type is a number (``int``, ``float``, a duration, optionally unset) and not text."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_number(typing.get_args(annotation)[0])
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return bool(args) and typing.get_origin(annotation) is not dict and all(_is_number(arg) for arg in args)
