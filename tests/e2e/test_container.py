"""Container: `ankusa healthcheck` against live, unready, draining and absent nodes; the
Dockerfile read as text (base, user, paths, ports, HEALTHCHECK, STOPSIGNAL, packages);
the compose example parsed, its worker URL and its config. No image is built here (no
registry is reachable), so the image's promises are checked on the files."""
import json
import shlex
import shutil
import signal
import socket
import subprocess
import time

import pytest
import yaml

from helpers import BIN, REPO, SLOW, free_ports, http_request, principal, run_cli, wait_until

DOCKERFILE = REPO / "Dockerfile"
IMAGE_CONFIG = REPO / "deploy" / "docker" / "ankusa.yml"
COMPOSE = REPO / "deploy" / "compose" / "docker-compose.yml"
COMPOSE_CONFIG = REPO / "deploy" / "compose" / "ankusa.yml"
CONF = "/etc/ankusa/ankusa.yml"
DATA = "/var/lib/ankusa"


def healthcheck(*args, env=None):
    t0 = time.monotonic()
    p = run_cli("healthcheck", *args, env=env)
    return p, time.monotonic() - t0


def one_failure_line(p):
    assert p.returncode == 1, f"exit {p.returncode}, expected 1\nstdout: {p.stdout}\nstderr: {p.stderr}"
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line saying what failed:\n{p.stderr}"
    return lines[0]


# --------------------------------------------------------------------------- healthcheck

def test_healthcheck_ok_on_a_running_node(ankusa):
    s = ankusa()
    p, took = healthcheck("--config", s.config_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (f"ankusa healthcheck: ok (ingest 127.0.0.1:{s.http_port} ready, "
                                f"admin 127.0.0.1:{s.admin_port} ready)"), p.stdout
    assert took < 5 * SLOW


def test_healthcheck_finds_the_config_like_serve(ankusa):
    """No --config: ANKUSA_CONFIG, as serve reads it."""
    s = ankusa()
    p, _ = healthcheck(env={"ANKUSA_CONFIG": s.config_path})
    assert p.returncode == 0, p.stderr
    assert f"ingest 127.0.0.1:{s.http_port} ready" in p.stdout


def test_healthcheck_without_admin_probes_ingest_only(ankusa):
    s = ankusa(config={"admin": {"enabled": False}})
    p, _ = healthcheck("--config", s.config_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"ankusa healthcheck: ok (ingest 127.0.0.1:{s.http_port} ready)"


def test_healthcheck_ingest_any_address_probes_loopback(ankusa):
    s = ankusa(config={"http": {"ip": "0.0.0.0"}})
    p, _ = healthcheck("--config", s.config_path)
    assert p.returncode == 0, p.stderr
    assert f"ingest 127.0.0.1:{s.http_port} ready" in p.stdout


def test_healthcheck_admin_with_principals_on_any_address(ankusa):
    """The container way to publish the admin API: 0.0.0.0 with principals. /ready stays
    open (no token), and the probe goes to loopback."""
    s = ankusa(config={"admin": {"ip": "0.0.0.0",
                                 "principals": [principal("prom", "t0ken-prom", ["metrics:read"], "*")]}})
    p, _ = healthcheck("--config", s.config_path)
    assert p.returncode == 0, p.stderr
    assert f"admin 127.0.0.1:{s.admin_port} ready" in p.stdout


def test_healthcheck_store_unavailable_is_1_with_the_reason(ankusa):
    # node.min_free_bytes beyond any disk: the node runs, but the store refuses every
    # commit (no_space), as on a full data volume, so /ready answers 503 on both ports
    s = ankusa(config={"node": {"min_free_bytes": 1 << 60}}, start=False)
    s.start(wait=False)
    wait_until(lambda: _status(s.http_port) == 503, what="/ready 503 no_space")
    line = one_failure_line(healthcheck("--config", s.config_path)[0])
    assert line == (f"ankusa healthcheck: ingest listener 127.0.0.1:{s.http_port} /ready failed: "
                    f"status 503 not_ready (store: no_space)"), line


def test_healthcheck_draining_is_1_status_503_draining(ankusa):
    s = ankusa(config={"listener": {"drain_delay_ms": 4000}})
    s.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: _status(s.http_port) == 503, what="/ready 503 draining")
    p, _ = healthcheck("--config", s.config_path)
    line = one_failure_line(p)
    assert line == (f"ankusa healthcheck: ingest listener 127.0.0.1:{s.http_port} /ready failed: "
                    f"status 503 draining"), line
    assert s.wait_exit(30) == 0, s.log_tail()


def test_healthcheck_nothing_listening_is_connection_refused(tmp_path):
    http_port, admin_port = free_ports(2)
    cfg = tmp_path / "ankusa.yml"
    cfg.write_text(f"node: {{data_dir: {tmp_path / 'd'}}}\nhttp: {{port: {http_port}}}\n"
                   f"admin: {{port: {admin_port}}}\nsources:\n  demo: {{sinks: [{{type: log}}]}}\n")
    p, took = healthcheck("--config", cfg)
    line = one_failure_line(p)
    assert line == (f"ankusa healthcheck: ingest listener 127.0.0.1:{http_port} /ready failed: "
                    f"connection refused"), line
    assert took < 5 * SLOW
    assert not (tmp_path / "d").exists(), "healthcheck must not create the data dir"


def test_healthcheck_admin_down_names_the_admin_listener(ankusa, tmp_path):
    """Ingest answers 200, the admin port in the config has nothing behind it."""
    s = ankusa()
    (other,) = free_ports(1)
    cfg = dict(s.config, admin=dict(s.config["admin"], port=other))
    path = tmp_path / "probe.yml"
    path.write_text(json.dumps(cfg))
    line = one_failure_line(healthcheck("--config", path)[0])
    assert line == f"ankusa healthcheck: admin listener 127.0.0.1:{other} /ready failed: connection refused", line


def test_healthcheck_silent_listener_times_out_in_2s(tmp_path):
    """A socket that accepts (the kernel's backlog) and never answers."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    try:
        port = lsock.getsockname()[1]
        cfg = tmp_path / "ankusa.yml"
        cfg.write_text(f"http: {{port: {port}}}\nadmin: {{enabled: false}}\n"
                       f"sources:\n  demo: {{sinks: [{{type: log}}]}}\n")
        p, took = healthcheck("--config", cfg)
        line = one_failure_line(p)
        want = f"ankusa healthcheck: ingest listener 127.0.0.1:{port} /ready failed: timeout after 2000 ms"
        assert line.startswith(want), line
        assert 1.8 < took < 6 * SLOW, took
    finally:
        lsock.close()


def test_healthcheck_invalid_config_exits_78(tmp_path):
    cfg = tmp_path / "ankusa.yml"
    cfg.write_text("http: {port: 70000}\n")
    p, _ = healthcheck("--config", cfg)
    assert p.returncode == 78, p.stderr
    assert p.stderr.splitlines()[0] == "ankusa: invalid configuration"
    assert "http.port" in p.stderr


def test_healthcheck_in_usage():
    p = run_cli("help")
    assert "ankusa healthcheck [--config FILE]" in p.stdout


def _status(port):
    try:
        return http_request(port, "GET", "/ready", timeout=2).status
    except OSError:
        return None


# --------------------------------------------------------------------------- Dockerfile

def dockerfile_stages():
    """[(base, [(INSTRUCTION, args text)])]: one entry per FROM, continuation lines joined,
    comments dropped."""
    logical, cur = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        logical.append(cur + line)
        cur = ""
    assert not cur, "Dockerfile ends inside a continuation"
    stages = []
    for ln in logical:
        ins, _, rest = ln.partition(" ")
        ins = ins.upper()
        if ins == "FROM":
            stages.append((rest.split()[0], []))
        else:
            assert stages, f"instruction before FROM: {ln}"
            stages[-1][1].append((ins, rest.strip()))
    return stages


def exec_form(text):
    """A JSON exec form (["a", "b"]) as a list; a shell form split like sh would."""
    text = text.strip()
    return json.loads(text) if text.startswith("[") else shlex.split(text)


def final(ins):
    stages = dockerfile_stages()
    return [a for i, a in stages[-1][1] if i == ins]


def test_dockerfile_bookworm_stages():
    stages = dockerfile_stages()
    assert len(stages) >= 2, "expected a build stage and a runtime stage"
    for base, _ in stages:
        assert base.startswith("debian:bookworm"), f"base {base!r} is not Debian 12 (bookworm)"
    assert stages[-1][0] == "debian:bookworm-slim"
    build = " ".join(a for i, a in stages[0][1] if i == "RUN")
    assert "make" in build.split(), "the build stage does not run make"


def test_dockerfile_runs_as_non_root_user():
    users = final("USER")
    assert users, "no USER in the runtime stage: the node would run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), users
    assert users[-1] == "ankusa"
    run = " ".join(final("RUN"))
    assert "useradd" in run and "ankusa" in run


def test_dockerfile_paths_config_and_data_volume():
    copies = [a.split() for a in final("COPY")]
    assert any(c[-1] == CONF for c in copies), f"nothing copied to {CONF}: {copies}"
    vols = [v for a in final("VOLUME") for v in exec_form(a)]
    assert DATA in vols, vols
    # the baked-in config keeps its data on that volume and loads
    assert yaml.safe_load(IMAGE_CONFIG.read_text())["node"]["data_dir"] == DATA
    p = run_cli("check-config", "--config", IMAGE_CONFIG)
    assert p.returncode == 0, p.stderr


def test_dockerfile_exposes_4000_to_4003():
    ports = {int(p.split("/")[0]) for a in final("EXPOSE") for p in a.split()}
    assert ports == {4000, 4001, 4002, 4003}, ports


def test_dockerfile_healthcheck_stopsignal_and_command():
    hc = final("HEALTHCHECK")
    assert len(hc) == 1, hc
    opts, sep, cmd = hc[0].partition("CMD ")
    assert sep, hc
    assert exec_form(cmd) == ["ankusa", "healthcheck", "--config", CONF]
    # Docker's timeout must cover both probes (2 s each)
    timeout = [o for o in opts.split() if o.startswith("--timeout=")]
    assert timeout and int(timeout[0].split("=")[1].rstrip("s")) >= 5, opts
    assert final("STOPSIGNAL") == ["SIGTERM"]
    argv = exec_form(final("ENTRYPOINT")[-1]) + exec_form((final("CMD") or ["[]"])[-1])
    assert argv == ["ankusa", "serve", "--config", CONF], argv
    text = DOCKERFILE.read_text()
    assert "docker stop -t 40" in text and "stop_grace_period: 40s" in text


def test_dockerfile_installs_what_the_binary_links():
    """Build stage: every -dev package of scripts/deps.sh that the build needs. Runtime
    stage: the package of every shared library the binary names (NEEDED), by dpkg."""
    stages = dockerfile_stages()
    build_run = " ".join(a for i, a in stages[0][1] if i == "RUN").split()
    deps = (REPO / "scripts" / "deps.sh").read_text()
    pkgs = deps.split("PKGS=(", 1)[1].split(")", 1)[0].split()
    needed_dev = [p for p in pkgs if p.endswith("-dev") and p not in ("libcriterion-dev", "libclang-rt-14-dev", "libfuse3-dev")]  # test-only
    for p in needed_dev + ["meson", "ninja-build", "pkg-config", "build-essential"]:
        assert p in build_run, f"build stage lacks {p}"
    if not (shutil.which("readelf") and shutil.which("dpkg")):
        pytest.skip("readelf/dpkg not available to map the binary's libraries to packages")
    out = subprocess.run(["readelf", "-d", BIN], capture_output=True, text=True, check=True).stdout
    libs = [ln.split("[", 1)[1].split("]", 1)[0] for ln in out.splitlines() if "(NEEDED)" in ln]
    runtime_run = " ".join(final("RUN")).split()
    for lib in libs:
        if lib.startswith(("libasan.", "libubsan.", "liblsan.", "libtsan.")):
            continue  # the sanitizer build's runtime (ANKUSA_SANITIZER runs); never in the image's build
        p = subprocess.run(["dpkg", "-S", f"*/{lib}"], capture_output=True, text=True)
        if p.returncode != 0:
            continue
        owners = {ln.split(":")[0] for ln in p.stdout.splitlines()}
        if owners & {"libc6"}:
            continue  # in every Debian base image
        assert owners & set(runtime_run), f"{lib} (package {sorted(owners)}) is not installed in the runtime stage"


def test_dockerignore_keeps_build_trees_out():
    lines = {ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()}
    for want in (".git", "build", "build-*", "data"):
        assert want in lines, f".dockerignore lacks {want}"


# --------------------------------------------------------------------------- compose

def compose():
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_topology_ankusa_and_worker():
    c = compose()
    svcs = c["services"]
    assert set(svcs) >= {"ankusa", "worker"}, svcs
    a = svcs["ankusa"]
    assert any(v.split(":")[1] == CONF for v in a["volumes"] if v.startswith("./ankusa.yml:")), a["volumes"]
    assert any(v.split(":")[1] == DATA for v in a["volumes"]), a["volumes"]
    assert a["stop_grace_period"] == "40s"
    assert "worker" in a["depends_on"]
    assert not any(str(p).split(":")[-1] == "4002" for p in a.get("ports", [])), \
        "the admin port is loopback inside the container: publishing it reaches nothing"
    worker = svcs["worker"]
    assert "8080" in json.dumps(worker), worker
    text = COMPOSE.read_text() + COMPOSE_CONFIG.read_text()
    assert "refused" in text and "principals" in text, "the admin/principals rule is not explained"


def test_compose_config_delivers_to_the_worker():
    cfg = yaml.safe_load(COMPOSE_CONFIG.read_text())
    urls = [s["url"] for src in cfg["sources"].values() for s in src["sinks"] if s["type"] == "http"]
    assert urls == ["http://worker:8080/hooks"], urls
    assert cfg["node"]["data_dir"] == DATA
    assert cfg["admin"]["ip"] == "127.0.0.1" or cfg["admin"].get("principals")


def test_compose_config_passes_check_config():
    """The quickstart topology: its operator-written http://worker:8080/hooks sink is trusted."""
    p = run_cli("check-config", "--config", COMPOSE_CONFIG)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "config OK: roles=[:edge, :dispatch, :storage] sources=demo wal=disk storage=Ankusa.BlobStore.LocalFS"


def test_compose_admin_on_any_address_without_principals_is_refused(tmp_path):
    """What the comment in the compose config says: admin.ip 0.0.0.0 needs principals."""
    cfg = yaml.safe_load(COMPOSE_CONFIG.read_text())
    cfg["admin"]["ip"] = "0.0.0.0"
    for src in cfg["sources"].values():
        src["sinks"] = [{"type": "log"}]
    path = tmp_path / "ankusa.yml"
    path.write_text(json.dumps(cfg))
    p = run_cli("check-config", "--config", path)
    assert p.returncode == 78, p.stderr
    assert "admin" in p.stderr and "principals" in p.stderr, p.stderr
