"""tshell's settings resolution and the pure helpers of the run commands (no server)."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import urllib.parse
from pathlib import Path

import pytest

from tshell.airflow_client import (
    AirflowInternalError,
    AirflowServerError,
    AirflowSession,
    describe_api_detail,
    read_token_expiry,
)
from tshell.cli import run as run_tshell_cli
from tshell.config import AirflowConfig, ConfigError, load_config
from tshell.exitcodes import CommandError, ExitCode
from tshell.runs import commands as run_commands
from tshell.runs.logs import select_replica_lines
from tshell.runs.submit import apply_overrides, build_conf
from tshell.runs.views import format_table


@pytest.fixture(autouse=True)
def no_embedded_services(tmp_path, monkeypatch):
    # A running `make up` on this machine must not leak into these tests.
    monkeypatch.setattr("tshell.config.SERVICES_FILE", tmp_path / "no-services.json")


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_environment_wins_over_config_file(tmp_path):
    path = write_config(tmp_path, "airflow: {url: 'http://file:1', username: u, password: p}\n")
    env = {"TSHELL_AIRFLOW_URL": "http://env:2/", "TSHELL_PASSWORD": "secret"}
    config = load_config(env, path)
    assert config.airflow.url == "http://env:2"
    assert (config.airflow.username, config.airflow.password) == ("u", "secret")


def test_config_file_supplies_airflow_settings(tmp_path):
    path = write_config(tmp_path, "airflow: {url: 'http://file:1', username: u, password: p}\n")
    config = load_config({}, path)
    assert (config.airflow.url, config.airflow.username) == ("http://file:1", "u")


def test_an_s3_section_is_refused_saying_that_files_come_through_airflow(tmp_path):
    path = write_config(
        tmp_path,
        "airflow: {url: 'http://file:1', username: u, password: p}\n"
        "s3: {endpoint_url: 'http://s3:9', region: eu-west-1}\n",
    )
    with pytest.raises(ConfigError) as refused:
        load_config({}, path)
    assert f"config file {path}: 's3' is not read any more" in str(refused.value)
    assert "come through Airflow" in str(refused.value)


def write_users_file(home: Path, users: dict[str, str]) -> None:
    home.mkdir(exist_ok=True)
    (home / "tfjob_users.json").write_text(json.dumps(users))


def test_embedded_default_reads_the_admin_password_make_up_wrote(tmp_path):
    home = tmp_path / "airflow"
    write_users_file(home, {"admin": "admin-pw", "demo-user": "demo-pw"})
    config = load_config({"AIRFLOW_HOME": str(home)}, tmp_path / "missing.yaml")
    assert config.airflow.url == "http://127.0.0.1:8080"
    assert (config.airflow.username, config.airflow.password) == ("admin", "admin-pw")


def test_embedded_default_reads_the_password_of_the_chosen_user(tmp_path):
    home = tmp_path / "airflow"
    write_users_file(home, {"admin": "admin-pw", "demo-user": "demo-pw"})
    env = {"AIRFLOW_HOME": str(home), "TSHELL_USERNAME": "demo-user"}
    assert load_config(env, tmp_path / "missing.yaml").airflow.password == "demo-pw"
    path = write_config(tmp_path, "airflow: {username: demo-user}\n")
    config = load_config({"AIRFLOW_HOME": str(home)}, path)
    assert (config.airflow.username, config.airflow.password) == ("demo-user", "demo-pw")


def test_a_user_the_users_file_lacks_is_named_with_the_file_and_its_users(tmp_path):
    home = tmp_path / "airflow"
    write_users_file(home, {"admin": "admin-pw", "demo-user": "demo-pw"})
    env = {"AIRFLOW_HOME": str(home), "TSHELL_USERNAME": "alice"}
    with pytest.raises(ConfigError) as caught:
        load_config(env, tmp_path / "missing.yaml")
    assert str(caught.value) == (
        f"user 'alice' is not in {home / 'tfjob_users.json'} (users: admin, demo-user); "
        "set TSHELL_USERNAME to one of them, or TSHELL_PASSWORD for another user"
    )


def test_a_password_given_needs_no_users_file_entry(tmp_path):
    home = tmp_path / "airflow"
    write_users_file(home, {"admin": "admin-pw"})
    env = {"AIRFLOW_HOME": str(home), "TSHELL_USERNAME": "alice", "TSHELL_PASSWORD": "pw"}
    assert load_config(env, tmp_path / "missing.yaml").airflow.password == "pw"


def test_embedded_default_uses_what_make_up_recorded(tmp_path):
    home = tmp_path / "airflow"
    write_users_file(home, {"admin": "gen-pw"})
    services = tmp_path / "services.json"
    services.write_text(
        json.dumps(
            {
                "airflow": {"url": "http://127.0.0.1:18080", "home": str(home)},
                "s3": {
                    "endpoint_url": "http://127.0.0.1:19000",
                    "access_key": "k",
                    "secret_key": "s",
                    "region": "us-east-1",
                },
            }
        )
    )
    config = load_config({"TSHELL_SERVICES_FILE": str(services)}, tmp_path / "missing.yaml")
    assert (config.airflow.url, config.airflow.password) == ("http://127.0.0.1:18080", "gen-pw")
    # The run commands hold no S3 key: a run's files come through Airflow.
    assert "'s'" not in repr(config) and not hasattr(config, "s3")


def test_missing_password_says_where_to_set_one(tmp_path):
    with pytest.raises(
        ConfigError, match="no Airflow password for user 'admin': set TSHELL_PASSWORD"
    ) as caught:
        load_config({"AIRFLOW_HOME": str(tmp_path)}, tmp_path / "missing.yaml")
    assert str(caught.value).endswith(f"writes {tmp_path / 'tfjob_users.json'}")


def test_config_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = write_config(tmp_path, "- a\n- b\n")
    with pytest.raises(ConfigError, match="a mapping with 'airflow' \\(and 'kubernetes'\\)"):
        load_config({"TSHELL_PASSWORD": "x"}, path)


def test_overrides_set_nested_fields_with_yaml_values():
    data = {"name": "a", "replicas": {"worker": 1}}
    result = apply_overrides(
        data, ["replicas.worker=3", "replicas.ps=2", "args=[--epochs, '5']", "resources.ps.cpu=1"]
    )
    assert result["replicas"] == {"worker": 3, "ps": 2}
    assert result["args"] == ["--epochs", "5"]
    assert result["resources"] == {"ps": {"cpu": 1}}
    assert data == {"name": "a", "replicas": {"worker": 1}}


def test_overrides_keep_env_values_as_strings():
    assert apply_overrides({}, ["env.EPOCHS=5"]) == {"env": {"EPOCHS": "5"}}


@pytest.mark.parametrize(
    ("item", "message"),
    [("replicas", "KEY=VALUE is required"), ("name.first=x", "'name' is not a mapping")],
)
def test_malformed_overrides_are_refused(item, message):
    with pytest.raises(CommandError, match=message) as caught:
        apply_overrides({"name": "a"}, [item])
    assert caught.value.code == ExitCode.INVALID_REQUEST


def test_build_conf_validates_and_fills_defaults(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(
        "name: digits\ntenant: team-a\nentrypoint: [python3, train.py]\n"
        "bundle: s3://bundles/d.tar.gz\noutput: s3://models/digits\n"
    )
    conf = build_conf(path, ["mode=distributed", "replicas.ps=1", "replicas.worker=2"])
    assert conf["replicas"]["worker"] == 2 and conf["port"] == 2222
    json.dumps(conf)  # a JSON-ready dict, as the REST API needs
    with pytest.raises(CommandError, match=r"request\.replicas\.ps: 0 given") as caught:
        build_conf(path, ["mode=distributed", "replicas.ps=0", "replicas.worker=2"])
    assert caught.value.code == ExitCode.INVALID_REQUEST


def test_missing_request_file_is_named(tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        build_conf(tmp_path / "nope.yaml", [])


def test_replica_lines_are_selected_by_role_and_index():
    lines = ["[worker-0] a", "[ps-0] b", "[worker-1] c", "[worker-0]   d", "plain"]
    assert select_replica_lines(lines, "worker", 0) == ["a", "d"]
    assert select_replica_lines(lines, "worker", 1) == ["c"]
    assert select_replica_lines(lines, None, None) == lines


def test_table_columns_are_aligned():
    table = format_table(("run id", "state"), [["a", "success"], ["longer-id", None]])
    assert table.splitlines() == ["RUN ID     STATE", "a          success", "longer-id"]


def test_server_detail_is_reduced_to_the_line_naming_the_field():
    body = json.dumps({"detail": "Invalid input for param tenant: 'x'\n\nFailed validating"})
    assert describe_api_detail(body) == "Invalid input for param tenant: 'x'"
    validation = json.dumps(
        {"detail": [{"loc": ["body", "logical_date"], "msg": "Field required"}]}
    )
    assert describe_api_detail(validation) == "logical_date: Field required"


def test_token_expiry_is_read_from_the_jwt_claims():
    claims = base64.urlsafe_b64encode(json.dumps({"exp": 1234}).encode()).decode().rstrip("=")
    assert read_token_expiry(f"h.{claims}.s") == 1234.0
    assert read_token_expiry("garbage") is None


class FlakyAirflow(http.server.BaseHTTPRequestHandler):
    """Answers `failure_code` with `failure_detail` to the first `failures` GETs, then a run."""

    failures = 2
    failure_code = 503
    failure_detail = "upstream connect error"
    answered: list[int] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.reply(200, {"access_token": "t"})

    def do_GET(self):  # noqa: N802
        failing = len(self.answered) < self.failures
        code = self.failure_code if failing else 200
        self.answered.append(code)
        self.reply(code, {"detail": self.failure_detail} if failing else {"state": "running"})

    def reply(self, code, body):
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def flaky_airflow(monkeypatch):
    monkeypatch.setattr(FlakyAirflow, "answered", [])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyAirflow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield AirflowConfig(f"http://127.0.0.1:{server.server_port}", "admin", "pw")
    server.shutdown()


@pytest.mark.parametrize("code", [502, 503, 504])
def test_a_read_answered_by_an_unavailable_airflow_or_proxy_is_asked_again(
    flaky_airflow, monkeypatch, capsys, code
):
    monkeypatch.setattr(run_commands, "POLL_INTERVAL_S", 0.01)
    monkeypatch.setattr(FlakyAirflow, "failure_code", code)
    session = AirflowSession(flaky_airflow)
    with pytest.raises(AirflowServerError, match=f"HTTP {code}.*upstream connect error"):
        session.get_json("/api/v2/dags/d/dagRuns/r")
    run = run_commands.call_patiently(lambda: session.get_json("/api/v2/dags/d/dagRuns/r"))
    assert run == {"state": "running"}
    assert FlakyAirflow.answered == [code, code, 200]
    assert "retrying" in capsys.readouterr().err


def test_an_unavailable_airflow_past_the_patience_is_reported(flaky_airflow, monkeypatch):
    monkeypatch.setattr(run_commands, "POLL_INTERVAL_S", 0.01)
    monkeypatch.setattr(FlakyAirflow, "failures", 1000)
    session = AirflowSession(flaky_airflow)
    with pytest.raises(AirflowServerError, match="HTTP 503"):
        run_commands.call_patiently(lambda: session.get_json("/x"), patience=0.2)


def test_a_500_is_reported_at_once_with_the_servers_detail(flaky_airflow, monkeypatch, capsys):
    monkeypatch.setattr(run_commands, "POLL_INTERVAL_S", 0.01)
    monkeypatch.setattr(FlakyAirflow, "failure_code", 500)
    monkeypatch.setattr(FlakyAirflow, "failure_detail", 'relation "dag_run" does not exist')
    session = AirflowSession(flaky_airflow)
    with pytest.raises(AirflowInternalError, match='HTTP 500: relation "dag_run" does not exist'):
        run_commands.call_patiently(lambda: session.get_json("/api/v2/dags/d/dagRuns/r"))
    assert FlakyAirflow.answered == [500]
    assert "retrying" not in capsys.readouterr().err


class LostAnswerAirflow(http.server.BaseHTTPRequestHandler):
    """Creates the first triggered run but answers 504, as a proxy that stopped waiting does."""

    runs: dict[str, dict] = {}
    posts: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/auth/token":
            self.reply(201, {"access_token": "t"})
            return
        self.posts.append(body["dag_run_id"])
        self.runs[body["dag_run_id"]] = {"dag_run_id": body["dag_run_id"], "state": "queued"}
        self.reply(504, {"detail": "upstream request timeout"})

    def do_GET(self):  # noqa: N802
        run_id = urllib.parse.unquote(self.path.rsplit("/", 1)[-1])
        found = self.runs.get(run_id)
        self.reply(200 if found else 404, found or {"detail": "not found"})

    reply = FlakyAirflow.reply
    log_message = FlakyAirflow.log_message


def test_a_trigger_whose_answer_was_lost_is_found_not_triggered_twice(
    tmp_path, monkeypatch, capsys
):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LostAnswerAirflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(run_commands, "POLL_INTERVAL_S", 0.01)
    monkeypatch.setenv("TSHELL_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("TSHELL_AIRFLOW_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("TSHELL_PASSWORD", "pw")
    request = tmp_path / "r.yaml"
    request.write_text(
        "name: digits\ntenant: team-a\nentrypoint: [python3, train.py]\n"
        "bundle: s3://bundles/d.tar.gz\noutput: s3://models/digits\n"
    )
    try:
        code = run_tshell_cli(["submit", str(request), "--json"])
    finally:
        server.shutdown()
    printed = json.loads(capsys.readouterr().out)
    assert code == ExitCode.OK
    assert LostAnswerAirflow.posts == [printed["run_id"]]
    assert printed["run_id"].startswith("manual__") and printed["state"] == "queued"


def test_status_lists_each_attempt_of_a_restarted_run():
    from tshell.runs.views import ATTEMPT_HEADERS, attempt_rows

    class FakeSession:
        def get_json(self, path, params=None):
            assert path.endswith("/taskInstances/train/xcomEntries/attempts")
            return {
                "value": [
                    {
                        "number": 1,
                        "outcome": "restarted",
                        "started": "2026-12-03T06:00:00+00:00",
                        "ended": "2026-12-03T06:05:00+00:00",
                        "failed_replica": "worker-1",
                        "exit_code": 143,
                        "reason": "worker-1 was deleted (exit code 143)",
                    },
                    {
                        "number": 2,
                        "outcome": "running",
                        "started": "2026-12-03T06:05:30+00:00",
                        "restored_checkpoint_step": 1200,
                    },
                ]
            }

    ref = run_commands.RunRef("tfjob__digits-ps", "manual__1")
    attempts = run_commands.fetch_attempts(FakeSession(), ref)
    table = format_table(ATTEMPT_HEADERS, attempt_rows(attempts))
    assert table.splitlines()[1].split()[:6] == [
        "1",
        "restarted",
        "2026-12-03",
        "06:00:00",
        "2026-12-03",
        "06:05:00",
    ]
    assert "worker-1 was deleted (exit code 143)" in table
    assert table.splitlines()[0].split()[4:6] == ["FROM", "STEP"]
    assert table.splitlines()[2].split()[:2] == ["2", "running"]
    assert "1200" in table.splitlines()[2]  # the checkpoint attempt 2 resumed from
