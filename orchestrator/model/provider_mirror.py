"""``terraform.provider_mirror``: where an air-gapped site keeps its Terraform providers.

Either an absolute directory in Terraform's filesystem-mirror layout or the ``https://`` URL of
a network mirror (Terraform accepts no other scheme for one). Relative paths are refused rather
than guessed: the engine runs Terraform in working directories far from the configuration file.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

NETWORK_SCHEME = "https://"


def is_network(location: str) -> bool:
    """Whether ``location`` names a network mirror (a URL) rather than a directory."""
    return location.startswith(NETWORK_SCHEME)


def _checked(value: str) -> str:
    if is_network(value):
        if len(value) == len(NETWORK_SCHEME) or any(c.isspace() for c in value):
            raise ValueError(f"{value!r} is not a usable https:// URL")
        return value
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is neither an absolute directory nor an https:// URL of a network mirror")
    if "\n" in value or "\x00" in value:
        raise ValueError("a mirror directory holds no line breaks or NUL characters")
    return value


ProviderMirror = Annotated[str, AfterValidator(_checked)]
