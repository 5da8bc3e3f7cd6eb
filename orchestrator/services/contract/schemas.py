"""The documents of the provider contract, as typed models; their JSON Schemas are ``SCHEMAS``.

Every input document is validated by its model (strict: a string is not a number, ``true`` is
not a count, text is bounded), so the exported schema and the validation are the same thing.
The host factory spells the template's id ``templateID``, the resource connector ``templateId``:
both are accepted on input (one of them: both at once are refused); answers use ``templateId``.
Unknown keys are ignored, as the schedulers send fields of their own (``rc_account``,
``userData``, ...); a known key with a wrong type is refused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

# Bounds on what one document may ask for: far above any honest request, far below what would
# cost memory or time to refuse.
MAX_MACHINES_PER_REQUEST = 10_000
MAX_IDS_PER_DOCUMENT = 10_000
MAX_ID_LENGTH = 256

BoundedText = StrictStr


def _text(description: str, *, min_length: int = 1) -> Any:
    return Field(min_length=min_length, max_length=MAX_ID_LENGTH, description=description)


class Document(BaseModel):
    """Base of every contract document: strict values, unknown keys ignored."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, populate_by_name=True)


# ----- inputs -----------------------------------------------------------------------------------


class GetAvailableTemplatesInput(Document):
    """``getAvailableTemplates``: no input of its own (an empty object)."""


def _either_spelling(schema: dict[str, Any]) -> None:
    """The input schema takes ``templateID`` as well as ``templateId`` (one of them)."""
    properties = schema["properties"]
    properties["templateID"] = {**properties["templateId"], "title": "TemplateID"}
    schema["required"] = [k for k in schema["required"] if k != "templateId"]
    schema["oneOf"] = [{"required": ["templateId"]}, {"required": ["templateID"]}]


class TemplateAsked(Document):
    """The template and count of a ``requestMachines``."""

    model_config = ConfigDict(json_schema_extra=_either_spelling)

    template_id: BoundedText = Field(
        min_length=1,
        max_length=MAX_ID_LENGTH,
        validation_alias=AliasChoices("templateId", "templateID"),
        serialization_alias="templateId",
        description="a templateId of getAvailableTemplates (templateID, the host factory's spelling, too)",
    )
    machine_count: StrictInt = Field(
        ge=1,
        le=MAX_MACHINES_PER_REQUEST,
        alias="machineCount",
        description="how many machines (at most the template's maxNumber less what the provider holds)",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        """Both spellings at once are one key given twice: refused, never one chosen silently."""
        if isinstance(data, dict) and "templateId" in data and "templateID" in data:
            raise ValueError("templateId and templateID both given (the same key twice): give one")
        return data


class RequestMachinesInput(Document):
    """``requestMachines``."""

    template: TemplateAsked
    client_token: BoundedText | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ID_LENGTH,
        alias="clientToken",
        description="the caller's idempotency key: the same token is the same request (one op), however late",
    )


class RequestRef(Document):
    """One request asked about."""

    request_id: BoundedText = Field(min_length=1, max_length=MAX_ID_LENGTH, alias="requestId")


class GetRequestStatusInput(Document):
    """``getRequestStatus``."""

    requests: list[RequestRef] = Field(min_length=1, max_length=MAX_IDS_PER_DOCUMENT)


class MachineRef(Document):
    """One machine named by the scheduler: its host name, and its cloud id when it has it."""

    name: BoundedText = _text("the host name (as getRequestStatus gave it)")
    machine_id: BoundedText | None = Field(
        default=None, max_length=MAX_ID_LENGTH, alias="machineId", description="the cloud's instance id"
    )


class RequestReturnMachinesInput(Document):
    """``requestReturnMachines``."""

    machines: list[MachineRef] = Field(min_length=1, max_length=MAX_IDS_PER_DOCUMENT)
    force: bool = Field(
        default=False,
        description="return machines whose host the controller reports running work too (audited); "
        "without it each such machine is answered fail with the reason",
    )


class GetReturnRequestsInput(Document):
    """``getReturnRequests``: optionally the machines the scheduler knows (host factory); ignored."""

    machines: list[MachineRef] = Field(default_factory=list, max_length=MAX_IDS_PER_DOCUMENT)


# ----- outputs ----------------------------------------------------------------------------------

Attribute = tuple[Literal["String", "Numeric", "Boolean"], str]


class OfferingOffered(Document):
    """One offering a template × provider launches its machines on."""

    name: str
    flavor: str
    zone: str | None = None
    subnet: str | None = None
    price_per_hour: float = Field(alias="pricePerHour")
    slots: int


class TemplateOffered(Document):
    """One template × provider the scheduler may ask for."""

    template_id: str = Field(alias="templateId")
    max_number: int = Field(alias="maxNumber")
    attributes: dict[str, Attribute]
    priority: int = Field(description="the provider's priority (higher is preferred)")
    price_per_hour: float = Field(alias="pricePerHour", description="its cheapest offering's price")
    offerings: list[OfferingOffered] = Field(
        default_factory=list, description="configured order; empty for a select: template (catalogue)"
    )


class GetAvailableTemplatesOutput(Document):
    templates: list[TemplateOffered]
    message: str = ""


class RequestAccepted(Document):
    """The answer of ``requestMachines`` and ``requestReturnMachines``: the op id is the request id."""

    request_id: str = Field(alias="requestId")
    message: str


MachineResult = Literal["executing", "succeed", "fail"]


class MachineStatus(Document):
    """One machine of a request."""

    machine_id: str = Field(alias="machineId", description="the cloud's instance id ('' before it exists)")
    name: str
    result: MachineResult
    status: str = Field(description="pending | running | bootstrapping | terminating | terminated | lost | failed")
    private_ip_address: str = Field(alias="privateIpAddress")
    launchtime: int = Field(description="unix seconds the instance was recorded created (0 before)")
    message: str
    offering: str = Field(default="", description="the offering it was placed on ('' when unknown)")


RequestState = Literal["running", "complete", "complete_with_error"]


class RequestStatus(Document):
    """One request's status; ``message`` says why when it is ``complete_with_error``."""

    request_id: str = Field(alias="requestId")
    status: RequestState
    machines: list[MachineStatus]
    message: str


class GetRequestStatusOutput(Document):
    requests: list[RequestStatus]


class ReturnRequest(Document):
    """A machine the cloud took or is taking back, or that passes ``max_lifetime``: close it in time."""

    machine: str = Field(description="the host name (as getRequestStatus gave it), the field the schedulers read")
    machine_id: str = Field(alias="machineId")
    grace_period: int = Field(alias="gracePeriod", description="seconds left before the machine goes (0: gone)")
    reason: str = Field(
        description="spot-reclaim | expired | lost | terminated (or the cloud's own reason) | returned | max_lifetime"
    )


class GetReturnRequestsOutput(Document):
    requests: list[ReturnRequest]
    message: str = ""


class ErrorBody(Document):
    """What went wrong, on one line."""

    type: str = Field(description="bad_input | unknown_request | held | unavailable | failed")
    message: str
    holder: str | None = Field(default=None, description="who holds the provider (type held)")


class ErrorOutput(Document):
    """Every action's answer when it failed; nothing was changed unless ``type`` is ``failed``."""

    error: ErrorBody
    message: str = Field(description="the error's message again, where LSF and a host factory read it")


INPUTS: dict[str, type[Document]] = {
    "getAvailableTemplates": GetAvailableTemplatesInput,
    "requestMachines": RequestMachinesInput,
    "getRequestStatus": GetRequestStatusInput,
    "requestReturnMachines": RequestReturnMachinesInput,
    "getReturnRequests": GetReturnRequestsInput,
}

OUTPUTS: dict[str, type[Document]] = {
    "getAvailableTemplates": GetAvailableTemplatesOutput,
    "requestMachines": RequestAccepted,
    "getRequestStatus": GetRequestStatusOutput,
    "requestReturnMachines": RequestAccepted,
    "getReturnRequests": GetReturnRequestsOutput,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every action's ``input`` and ``output`` JSON Schema, and the ``error`` document's."""
    out: dict[str, dict[str, Any]] = {
        action: {
            "input": INPUTS[action].model_json_schema(by_alias=True, mode="validation"),
            "output": OUTPUTS[action].model_json_schema(by_alias=True, mode="serialization"),
        }
        for action in INPUTS
    }
    out["error"] = {"output": ErrorOutput.model_json_schema(by_alias=True, mode="serialization")}
    return out
