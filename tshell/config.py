"""Where tshell's commands find Airflow (URL and login) and the cluster, in what order.

Why this exists: the same CLI talks to the embedded default on this machine and
to a real Airflow elsewhere, and a person should never have to guess which
setting won. The run commands read no S3: a run's files come through Airflow
(tshell/runs/files.py); push and upload find S3 on their own (pack_commands.py).
Order, first found wins, field by field:

1. environment: TSHELL_AIRFLOW_URL, TSHELL_USERNAME, TSHELL_PASSWORD,
   TSHELL_KUBECONFIG;
2. the config file: $TSHELL_CONFIG, else ~/.config/tshell/config.yaml
   (``airflow: {url, username, password}``, ``kubernetes: {kubeconfig}``),
   then KUBECONFIG (its first file) for the cluster;
3. the embedded default (`make up`): the URLs that scripts/services.py
   recorded in its services file, else http://127.0.0.1:8080; the user
   (TSHELL_USERNAME, the file's username, else admin) with its password from
   <airflow home>/tfjob_users.json, which `make up` writes (username →
   password: admin and `<role>-user` for each tenant role; home:
   $AIRFLOW_HOME, else the one the services file records, else
   .state/airflow).

The embedded default's files are found without knowing where tshell is
installed: the services file is $TSHELL_SERVICES_FILE, else
.state/services.json (and the Airflow home .state/airflow) of the current
directory or its nearest parent that has one, as where `make up` ran.

The cluster, one lookup for every command (`find_kubeconfig`): --kubeconfig
where a command takes it, then the order above (TSHELL_KUBECONFIG, the config
file, KUBECONFIG, the embedded default's localkube). A command that needs a
cluster (tenants) then tries ~/.kube/config; the run commands then leave the
pods to Airflow's task states.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from tfjob.jsontypes import JsonObject
from tshell.errors import TshellError

DEFAULT_AIRFLOW_URL = "http://127.0.0.1:8080"
DEFAULT_USERNAME = "admin"
DEFAULT_CONFIG_PATH = Path("~/.config/tshell/config.yaml")
USERS_FILE = "tfjob_users.json"
# Where `make up` keeps the embedded default (scripts/services.py --state-dir), relative to
# the directory it ran in.
EMBEDDED_STATE_DIR = Path(".state")
SERVICES_FILE = EMBEDDED_STATE_DIR / "services.json"
EMBEDDED_AIRFLOW_HOME = EMBEDDED_STATE_DIR / "airflow"


class ConfigError(TshellError, ValueError):
    """The configuration is unusable; the message names the setting and the fix."""


@dataclass(frozen=True)
class AirflowConfig:
    url: str
    username: str
    password: str


@dataclass(frozen=True)
class TshellConfig:
    airflow: AirflowConfig
    # For live replica logs; None when no cluster is configured (logs then come from Airflow).
    kubeconfig: str | None = None


def read_config_file(path: Path) -> JsonObject:
    """The config file as a dict; {} when it does not exist."""
    path = path.expanduser()
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path}: a mapping with 'airflow' (and 'kubernetes') is required"
        )
    if "s3" in data:
        raise ConfigError(
            f"config file {path}: 's3' is not read any more: download and logs come through "
            f"Airflow (an Airflow login is all they need), and push and upload take S3 from "
            f"TSHELL_S3_ENDPOINT_URL or AWS_ENDPOINT_URL and boto3's usual chain; remove it"
        )
    for section in ("airflow", "kubernetes"):
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"config file {path}: '{section}' must be a mapping")
    return data


def read_embedded_password(airflow_home: Path, username: str) -> str | None:
    """`username`'s password in the embedded Airflow's users file; None when there is no file.

    A file without the user is an error that names the users it has: a wrong
    TSHELL_USERNAME should not read as "start Airflow".
    """
    path = airflow_home / USERS_FILE
    try:
        users = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"users file {path}: not readable as JSON ({exc})") from None
    if not isinstance(users, dict):
        raise ConfigError(f"users file {path}: a JSON object of username → password is required")
    if username not in users:
        raise ConfigError(
            f"user {username!r} is not in {path} (users: {', '.join(sorted(users)) or 'none'}); "
            f"set TSHELL_USERNAME to one of them, or TSHELL_PASSWORD for another user"
        )
    return str(users[username])


def read_services_file(path: Path) -> JsonObject:
    """What `make up` recorded about the embedded default; {} when it is not up."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def find_embedded_path(relative: Path, start: Path | None = None) -> Path:
    """`relative` under `start` (the current directory) or its nearest parent that holds
    it; under `start` when none does. An absolute `relative` is itself."""
    start = Path.cwd() if start is None else start
    for folder in (start, *start.parents):
        if (folder / relative).exists():
            return folder / relative
    return start / relative


def find_kubeconfig(
    env: Mapping[str, str],
    file_data: Mapping[str, object],
    services: Mapping[str, object],
    given: str | None = None,
) -> str | None:
    """The cluster's kubeconfig, first found wins (the module's docstring); None when none."""
    return (
        given
        or env.get("TSHELL_KUBECONFIG")
        or file_data.get("kubernetes", {}).get("kubeconfig")
        or env.get("KUBECONFIG", "").split(os.pathsep)[0]
        or services.get("localkube", {}).get("kubeconfig")
        or None
    )


def read_sources(
    env: Mapping[str, str], config_path: Path | None
) -> tuple[Path, JsonObject, JsonObject]:
    """The config file's path and contents, and the embedded default's services record."""
    path = config_path or Path(env.get("TSHELL_CONFIG", str(DEFAULT_CONFIG_PATH)))
    services_path = env.get("TSHELL_SERVICES_FILE") or find_embedded_path(SERVICES_FILE)
    return path, read_config_file(path), read_services_file(Path(services_path))


def load_kubeconfig(
    given: str | None = None,
    env: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> str | None:
    """The cluster alone, for commands that need no Airflow login (tenants)."""
    env = os.environ if env is None else env
    _, data, services = read_sources(env, config_path)
    return find_kubeconfig(env, data, services, given)


def load_config(
    env: Mapping[str, str] | None = None, config_path: Path | None = None
) -> TshellConfig:
    """Resolve every setting (environment, then config file, then the embedded default)."""
    env = os.environ if env is None else env
    path, data, services = read_sources(env, config_path)
    file_airflow = data.get("airflow", {})
    embedded_airflow = services.get("airflow", {})

    url = (
        env.get("TSHELL_AIRFLOW_URL")
        or file_airflow.get("url")
        or embedded_airflow.get("url")
        or DEFAULT_AIRFLOW_URL
    )
    username = env.get("TSHELL_USERNAME") or file_airflow.get("username") or DEFAULT_USERNAME
    password = env.get("TSHELL_PASSWORD") or file_airflow.get("password")
    if not password:
        home = Path(
            env.get("AIRFLOW_HOME")
            or embedded_airflow.get("home")
            or find_embedded_path(EMBEDDED_AIRFLOW_HOME)
        )
        password = read_embedded_password(home, username)
        if not password:
            raise ConfigError(
                f"no Airflow password for user {username!r}: set TSHELL_PASSWORD, or 'airflow: "
                f"{{password: …}}' in {path}, or start the embedded Airflow (`make up`), which "
                f"writes {home / USERS_FILE}"
            )
    return TshellConfig(
        airflow=AirflowConfig(
            url=str(url).rstrip("/"), username=str(username), password=str(password)
        ),
        kubeconfig=find_kubeconfig(env, data, services),
    )
