"""The renderer keeps compiled templates between renders, yet a site template edited on disk
is what the next render uses (a daemon picks up a site's edit without a restart)."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.render.environment import TemplateRenderer


def test_an_edited_site_template_is_rendered_as_edited(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    page = site / "motd.j2"
    page.write_text("hello {{ who }}\n")
    first = TemplateRenderer([site]).render("motd.j2", "cpu", {"who": "a"})
    page.write_text("goodbye {{ who }}\n")
    stat = page.stat()
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))  # a later edit, whatever the clock
    second = TemplateRenderer([site]).render("motd.j2", "cpu", {"who": "b"})
    assert (first, second) == ("hello a\n", "goodbye b\n")


def test_renderers_of_one_search_path_share_their_compiled_templates(tmp_path: Path) -> None:
    (tmp_path / "x.j2").write_text("{{ 1 + 1 }}\n")
    one, two = TemplateRenderer([tmp_path]), TemplateRenderer([tmp_path])
    assert one.render("x.j2", "cpu", {}) == "2\n"
    assert one.env is two.env
    assert TemplateRenderer([tmp_path / "other"]).env is not one.env
