"""`tshell convert tfjob.yaml` and the TFJob side of `tshell submit`: Kubeflow manifests as is.

A team moving off Kubeflow's training operator keeps its `kubeflow.org/v1` TFJob files:
`convert` prints the request one becomes (the notes of the mapping first, as YAML comments),
and `submit` accepts the same file where it accepts a request. The file's size is checked
before it is read; the conversion itself is tfjob/kubeflow's (docs/kubeflow.md), which
refuses everything that does not map, naming each field's path, before anything starts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import yaml

from tfjob.jsontypes import JsonObject
from tfjob.kubeflow.convert import Conversion, Destination, convert_tfjob
from tfjob.kubeflow.errors import TFJobRefused
from tfjob.kubeflow.manifest import MAX_MANIFEST_BYTES, is_tfjob, parse_tfjob
from tshell.command import set_command
from tshell.exitcodes import CommandError, ExitCode
from tshell.runs.views import emit_json

if TYPE_CHECKING:
    from tshell.command import Subparsers


def read_limited_text(path: Path) -> str:
    """The file's text, its size checked before it is read (a request or a TFJob file)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise CommandError(f"file {str(path)!r} does not exist", ExitCode.INVALID_REQUEST) from None
    if size > MAX_MANIFEST_BYTES:
        raise CommandError(
            f"{path}: {size} bytes given; at most {MAX_MANIFEST_BYTES} bytes are read",
            ExitCode.INVALID_REQUEST,
        )
    return path.read_text(encoding="utf-8")


def is_tfjob_file(path: Path) -> bool:
    """Whether `path` holds a Kubeflow TFJob (rather than a request)."""
    try:
        data = yaml.safe_load(read_limited_text(path))
    except yaml.YAMLError:
        return False  # the request reader says what is wrong with it
    return is_tfjob(data)


def convert_tfjob_file(path: Path, destination: Destination) -> Conversion:
    """The request the TFJob file maps onto; CommandError listing every refused field."""
    try:
        return convert_tfjob(parse_tfjob(read_limited_text(path)), destination)
    except TFJobRefused as exc:
        raise CommandError(f"{path}: {exc}", ExitCode.INVALID_REQUEST) from None


def destination_of(args: argparse.Namespace) -> Destination:
    return Destination(bundle=args.bundle, tenant=args.tenant, output=args.output)


def write_notes(conversion: Conversion, stream: TextIO) -> None:
    """The mapping's notes, as YAML comments (a converted file stays loadable)."""
    for note in conversion.notes:
        stream.write(f"# note: {note}\n")


def cmd_convert(args: argparse.Namespace, out: TextIO) -> ExitCode:
    conversion = convert_tfjob_file(Path(args.tfjob), destination_of(args))
    if args.json:
        emit_json({"request": conversion.request_data(), "notes": list(conversion.notes)}, out)
        return ExitCode.OK
    write_notes(conversion, out)
    out.write(yaml.safe_dump(conversion.request_data(), sort_keys=False))
    return ExitCode.OK


def add_destination_options(parser: argparse.ArgumentParser) -> None:
    """--bundle, --tenant and --output: where a TFJob's code comes from and its run goes."""
    parser.add_argument(
        "--bundle",
        help="s3://bucket/key.tar.gz of the code (else annotation tf-on-k8s.io/bundle; "
        "neither: the program is in the image)",
    )
    parser.add_argument(
        "--tenant", help="tenant (else annotation tf-on-k8s.io/tenant, else metadata.namespace)"
    )
    parser.add_argument(
        "--output", help="s3://bucket/prefix for the runs (else annotation tf-on-k8s.io/output)"
    )


def tfjob_request_data(path: Path, destination: Destination) -> JsonObject | None:
    """For `submit`: the converted request of a TFJob file (its notes on stderr), else None.

    The destination options belong to TFJob files; a request names its own.
    """
    if is_tfjob_file(path):
        conversion = convert_tfjob_file(path, destination)
        write_notes(conversion, sys.stderr)
        return conversion.request_data()
    given = [f"--{name}" for name, value in vars(destination).items() if value is not None]
    if given:
        raise CommandError(
            f"{', '.join(given)}: for a Kubeflow TFJob file; a request file sets its fields "
            f"itself (or with --set, e.g. --set bundle=s3://...)",
            ExitCode.INVALID_REQUEST,
        )
    return None


def register(subparsers: Subparsers) -> None:
    """Add `convert` to tshell's subcommands."""
    convert = subparsers.add_parser(
        "convert", help="print the request a Kubeflow TFJob (kubeflow.org/v1) becomes"
    )
    convert.add_argument("tfjob", help="TFJob manifest (.yaml or .json)")
    add_destination_options(convert)
    convert.add_argument("--json", action="store_true", help="machine-readable output")
    set_command(convert, cmd_convert)
