"""The controller CA reaches user data only when the file holds certificates and nothing else."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.render.instances import RenderRequest, controller_context, render_op, renderer_for
from orchestrator.render.trust import check_certificates

BUILTIN = Path(__file__).resolve().parents[3] / "templates"
SITE = """
cluster: site1
controller: {{ca: {ca}}}
providers: {{sim: {{module: xcesim}}}}
templates: {{cpu: {{providers: {{sim: {{flavor: c8.large, image: debian-12}}}}}}}}
"""


def key_and_cert() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


KEY, CERT = key_and_cert()


def user_data(tmp_path: Path, ca: str) -> dict[str, object]:
    config = parse_config(SITE.format(ca=ca), "site.yaml", tmp_path).config
    [spec] = render_op(
        config, renderer_for(config, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1)
    ).values()
    data = yaml.safe_load(spec.user_data)
    return {f["path"]: f["content"] for f in data["write_files"]}


def test_a_certificate_bundle_goes_into_user_data(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(CERT + CERT)  # two certificates (a chain) are fine
    files = user_data(tmp_path, "ca.pem")
    assert files["/etc/xce/ca.pem"] == (CERT + CERT).decode()


def test_system_trust_writes_no_ca_file(tmp_path: Path) -> None:
    assert "/etc/xce/ca.pem" not in user_data(tmp_path, "system")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (CERT + KEY, "holds a PRIVATE KEY block; only CERTIFICATE blocks may go to provisioned hosts"),
        (KEY + CERT, "holds a PRIVATE KEY block"),
        (b"", "holds no PEM CERTIFICATE block"),
        (b"Bag Attributes\n" + CERT, "holds text outside PEM blocks"),
        (CERT + b"-----BEGIN CERTIFICATE-----\nMIIB\n", "holds a malformed or unterminated PEM block"),
        (b"-----BEGIN CERTIFICATE-----\nbm90IGRlcg==\n-----END CERTIFICATE-----\n", "certificate 1 is not valid PEM"),
    ],
)
def test_anything_but_certificates_is_refused_naming_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "ca.pem").write_bytes(content)
    with pytest.raises(ConfigError) as info:
        user_data(tmp_path, "ca.pem")
    [line] = info.value.problems
    assert line.startswith(f"controller.ca {tmp_path / 'ca.pem'}: ") and message in line
    assert KEY.decode().splitlines()[1] not in line  # never echoes key material


def test_a_missing_ca_file_is_refused_unless_validate_allows_it(tmp_path: Path) -> None:
    config = parse_config(SITE.format(ca="absent.pem"), "site.yaml", tmp_path).config
    with pytest.raises(ConfigError, match=r"controller.ca .*absent.pem: file not found"):
        controller_context(config)
    assert controller_context(config, allow_missing_ca=True)["ca_pem"] is None


def test_check_counts_certificates() -> None:
    assert check_certificates((CERT * 3).decode(), "x") == 3
