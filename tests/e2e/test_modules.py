"""The structure the code keeps: modules as table rows, one source of truth for options,
and the layering of src/ (DESIGN.md §5)."""
import json
import re
import shutil
import subprocess

import pytest

import helpers
from helpers import REPO, run_cli, wait_until

RELEASE = REPO / "build" / "ankusa"
LAYERS = REPO / "scripts" / "layers.sh"
DOC = REPO / "docs" / "configuration.md"


def release_binary():
    if not RELEASE.exists():
        pytest.skip(f"{RELEASE} not built (make builds it; make test does too)")
    return str(RELEASE)


def options_markdown(binary):
    p = subprocess.run([binary, "options", "--markdown"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout


# ------------------------------------------------------------ one source of truth ----

def test_the_option_reference_in_the_docs_is_what_the_rows_generate():
    """docs/configuration.md holds the release build's `ankusa options --markdown` between
    its markers: a row added, removed or changed without regenerating the page fails here
    (regenerate: scripts/options-doc.sh)."""
    text = DOC.read_text()
    m = re.search(r"<!-- options:begin -->\n(.*)<!-- options:end -->", text, re.S)
    assert m, "docs/configuration.md has no <!-- options:begin/end --> region"
    generated = options_markdown(release_binary())
    assert m.group(1) == generated, (
        "docs/configuration.md differs from `build/ankusa options --markdown`: regenerate the region")


def test_the_reference_names_every_section_and_every_row():
    """The generator walks every module's rows and every plug-in's: spot checks across
    layers (a nested row, an env override, a required plug-in key, every section)."""
    md = options_markdown(helpers.BIN)
    for needle in ["### `node`", "| `roles` |", "`ANKUSA_HTTP_PORT`, `PORT`", "| `tls.client_ca` |",
                   "| `retry.max_attempts` |", "| `principals[].token_sha256` |", "secret: never printed",
                   "### `routes`", "### `lifecycle`", "#### `type: http`", "| `url` | string | **required**",
                   "#### `type: github`", "| `<id>.sinks` |"]:
        assert needle in md, needle


def test_options_needs_its_flag():
    p = run_cli("options")
    assert p.returncode == 64 and "--markdown" in p.stderr


# ------------------------------------------------ a capability is one file plus a row ----

def echo_config(tmp_path, path):
    return {"sources": {"a": {"sinks": [{"type": "test_echo", "path": str(path)}]}}}


def test_a_sink_is_one_file_and_one_registry_row(ankusa, tmp_path):
    """sinks/test_echo.c (test builds only) is one file plus its row in sinks/registry.c.
    With no other edit it is picked up by the config loader (its rows and its check hook),
    print-config, the option reference and the dispatcher, which delivers through it."""
    out = tmp_path / "echo.txt"
    # the loader: its rows (defaults) and its check hook (an absolute path)
    cfg = tmp_path / "c.yml"
    cfg.write_text(json.dumps(echo_config(tmp_path, out)))
    p = run_cli("check-config", "--config", cfg)
    assert p.returncode == 0, p.stderr
    cfg.write_text(json.dumps(echo_config(tmp_path, "relative.txt")))
    p = run_cli("check-config", "--config", cfg)
    assert p.returncode == 78, p.stderr
    assert "sources.a.sinks[0].path: must be an absolute path" in p.stderr
    cfg.write_text(json.dumps({"sources": {"a": {"sinks": [{"type": "test_echo"}]}}}))
    p = run_cli("check-config", "--config", cfg)
    assert p.returncode == 78 and 'sources.a.sinks[0]: missing required key "path"' in p.stderr, p.stderr
    # print-config: its keys with their defaults
    cfg.write_text(json.dumps(echo_config(tmp_path, out)))
    p = run_cli("print-config", "--config", cfg)
    assert p.returncode == 0, p.stderr
    sink = json.loads(p.stdout)["sources"]["a"]["sinks"][0]
    assert sink == {"type": "test_echo", "path": str(out), "prefix": "echo", "inline_max_bytes": None}
    # the option reference
    md = options_markdown(helpers.BIN)
    assert "#### `type: test_echo`" in md and "| `path` | string | **required**" in md
    # the dispatcher builds it from the registry and delivers through it
    s = ankusa(sources=echo_config(tmp_path, out)["sources"])
    r = s.post("/webhooks/a", b'{"n":1}')
    assert r.status == 201, r
    hook_id = r.json["id"]
    wait_until(lambda: out.exists() and f"echo {hook_id} a 1" in out.read_text(), timeout=20,
               what="the test_echo sink's delivery line")


def test_the_release_build_has_no_test_sink(tmp_path):
    """The test-only sink exists in test builds alone: the release binary neither lists it
    nor accepts it."""
    release = release_binary()
    assert "test_echo" not in options_markdown(release)
    cfg = tmp_path / "c.yml"
    cfg.write_text(json.dumps(echo_config(tmp_path, tmp_path / "x")))
    p = subprocess.run([release, "check-config", "--config", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 78, p.stderr
    assert 'unknown value "test_echo"' in p.stderr and "test_echo" not in p.stderr.split("expected one of")[1]


# ------------------------------------------------------------------------ layering ----

def layers(src):
    return subprocess.run(["bash", str(LAYERS), str(src)], capture_output=True, text=True, timeout=60)


def test_the_tree_keeps_its_layers():
    p = layers(REPO / "src")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "layers: ok"


@pytest.mark.parametrize("where,line,expect", [
    ("core/log.c", '#include "admin/admin.h"\n',
     'core/log.c:1 includes "admin/admin.h": core may not include admin'),
    ("store/store.h", '#include "queue/writer.h"\n',
     'store/store.h:1 includes "queue/writer.h": store may not include queue'),
    ("queue/writer.c", "#include <rocksdb/c.h>\n", "queue/writer.c includes a RocksDB header"),
], ids=["core-includes-admin", "store-includes-queue", "rocksdb-outside-store"])
def test_the_layers_check_refuses_a_breach(tmp_path, where, line, expect):
    """A deliberate breach in a copy of src/ fails the check, naming the file and the rule."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "src", src)
    f = src / where
    f.write_text(line + f.read_text())
    p = layers(src)
    assert p.returncode == 1, p.stdout
    assert expect in p.stdout, p.stdout


def test_the_layers_check_refuses_an_unknown_folder(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO / "src", src)
    (src / "misc").mkdir()
    (src / "misc" / "x.c").write_text('#include "core/log.h"\n')
    p = layers(src)
    assert p.returncode == 1 and "src/misc/ is not in the layer order" in p.stdout, p.stdout


# --------------------------------------------------------------- the test fence ----

def test_the_release_binary_carries_no_test_seam():
    """Every test-only switch, field and branch sits behind #ifdef AK_TEST_HOOKS (the one
    fence): the release binary holds none of their names. The test build does (the check
    would be empty if the names changed)."""
    release = release_binary()
    seams = [b"ANKUSA_TEST_", b"x-ankusa-test-now", b"test_echo"]
    blob = open(release, "rb").read()
    assert [s for s in seams if s in blob] == []
    test_blob = open(helpers.BIN, "rb").read()
    assert all(s in test_blob for s in seams), "the test build must have them: is the check still meaningful?"
