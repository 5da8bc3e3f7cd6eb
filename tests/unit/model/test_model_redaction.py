"""hide(): a secret hidden in any form a message carries it in (issue 27 item 1)."""

from __future__ import annotations

import json
import string
from urllib.parse import quote, quote_plus

import pytest

from orchestrator.model.redaction import hide, hide_output

# Every printable punctuation character (both orders), a space and a non-ASCII letter; the
# markers (letters and digits) are in every part of each password.
PASSWORDS = [f"Pw0{p[:16]}Mid9{p[16:]} é End7" for p in (string.punctuation, string.punctuation[::-1])]
MARKERS = ("Pw0", "Mid9", "End7")


def go_json(value: object) -> str:
    """JSON as Go writes it: ``<``, ``>``, ``&`` as ``\\u003c``, ``\\u003e``, ``\\u0026``."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def forms(secret: str) -> dict[str, str]:
    """The secret as messages carry it: raw, JSON, Go-quoted, both, percent-encoded, libpq-quoted."""
    go_quoted = json.dumps(secret)  # Go's %q of printable text
    return {
        "raw": secret,
        "json": json.dumps(secret),
        "go json": go_json(secret),
        "ascii json": json.dumps(secret, ensure_ascii=True),
        "go quoted": go_quoted,
        "go quoted in json": go_json(f"parse {go_quoted}: invalid userinfo"),
        "percent": quote(secret, safe=""),
        "percent lower": "".join(c if not c.startswith("%") else c.lower() for c in quote(secret, safe="")),
        "plus": quote_plus(secret, safe=""),
        "partly encoded": "".join(quote(c, safe="") if c in "@/%" else c for c in secret),
        "libpq keyword": "password='" + secret.replace("\\", "\\\\").replace("'", "\\'") + "'",
    }


@pytest.mark.parametrize("secret", PASSWORDS)
def test_every_form_of_the_secret_is_hidden_and_json_stays_json(secret: str) -> None:
    for name, form in forms(secret).items():
        text = f"before {form} after"
        shown = hide(text, [secret])
        assert not [m for m in MARKERS if m in shown], (name, shown)
        assert shown.startswith("before ") and shown.endswith(" after") and "***" in shown, (name, shown)
        out = hide_output(go_json({"@message": f"failed: {form}", "type": "log"}) + "\n", [secret])
        message = json.loads(out)["@message"]  # still JSON, whatever the secret's characters
        assert message.startswith("failed: ") and "***" in message and not [m for m in MARKERS if m in out]


@pytest.mark.parametrize("secret", PASSWORDS)
def test_a_start_of_the_secret_after_a_colon_is_hidden(secret: str) -> None:
    """Go's URL parser cuts a refused URL at "#" and names the "port" after the last ":"."""
    for cut in range(3, len(secret)):
        start = secret[:cut]
        for text in (f"parse {json.dumps('postgresql://xce:' + start)}: bad", go_json(f'invalid port ":{start}"')):
            shown = hide(text, [secret])
            assert "Pw0" not in shown and "***" in shown, (cut, shown)


def test_an_output_stays_json_and_what_holds_no_secret_is_kept_as_written() -> None:
    secret = 'pw-"\\'
    kept = '{"@level":"info","@message":"Terraform 1.14"}\n'
    document = json.dumps({"diagnostics": [{"summary": f"parse {json.dumps(secret)}"}]}, indent=2)
    out = hide_output(kept + go_json({"m": json.dumps(secret)}) + "\nplain " + secret + "\n", [secret])
    assert out == kept + r"""{"m": "\"***\""}""" + "\nplain ***\n"
    assert json.loads(hide_output(document, [secret])) == {"diagnostics": [{"summary": 'parse "***"'}]}
    assert hide_output(kept, [secret]) == kept and hide_output(document, []) == document


def test_ordinary_text_is_kept() -> None:
    text = 'Error: connection to server on "localhost:5432" failed: password authentication failed'
    assert hide(text, ["password1", "hunter2"]) == text
    assert hide(text, []) == text
    assert hide("user:hu and user:hunter", ["hunter2"]) == "user:hu and user:***"
