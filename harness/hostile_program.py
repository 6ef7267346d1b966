"""A hostile training program: what a tenant's code tries against its neighbours from its pod.

The program knows our source, docs and defaults, and is told (in its bundle's
`data/targets.json`, as it could have guessed or read them anywhere) where the
victim tenant's objects, pod and files are, and a leaked admin S3 key. Each
attempt prints one line `HOSTILE {"attempt": …, "outcome": "refused"|"ALLOWED", …}`;
`CONTROL` lines are what its own grants must still allow (so a refusal is the
gate's, not a broken network). It then writes a model, as any program does.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HOSTILE_PROGRAM = textwrap.dedent(
    '''
    import json, os, socket, urllib.error, urllib.request, uuid

    import boto3
    from botocore.config import Config

    targets = json.load(open(os.path.join(os.environ["DATA_DIR"], "targets.json")))
    endpoint = targets["endpoint"]
    bucket = targets["bucket"]


    def report(kind, attempt, outcome, detail=""):
        line = {"attempt": attempt, "outcome": outcome, "detail": str(detail)[:300]}
        print(kind + " " + json.dumps(line), flush=True)


    def call(request):
        """(status, body) of an HTTP request; status 0 when nothing answered."""
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError as error:
            return 0, str(error).encode()


    def judge(attempt, status, body):
        outcome = "ALLOWED" if 200 <= status < 300 else "refused"
        report("HOSTILE", attempt, outcome, f"{status} {body[:200]!r}")


    def presigner(access_key, secret_key):
        return boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=access_key,
            aws_secret_access_key=secret_key, region_name="us-east-1",
            config=Config(signature_version="s3v4"),
        )


    def multipart(fields, filename, content):
        """A multipart/form-data body with `fields` in order (names as given), file last."""
        boundary = uuid.uuid4().hex
        parts = []
        for name, value in fields:
            parts.append(f'--{boundary}\\r\\nContent-Disposition: form-data; name="{name}"'
                         f"\\r\\n\\r\\n{value}\\r\\n".encode())
        parts.append(f'--{boundary}\\r\\nContent-Disposition: form-data; name="file"; '
                     f'filename="{filename}"\\r\\nContent-Type: application/octet-stream'
                     "\\r\\n\\r\\n".encode() + content + b"\\r\\n")
        parts.append(f"--{boundary}--\\r\\n".encode())
        return b"".join(parts), f"multipart/form-data; boundary={boundary}"


    def post_form(url, fields, content=b"planted by a hostile program"):
        body, content_type = multipart(fields, "x.txt", content)
        return call(urllib.request.Request(url, data=body, method="POST",
                                           headers={"Content-Type": content_type}))


    # 1. Forged grants: presigned with a leaked admin key, the old default, a guessed key.
    for who, (access_key, secret_key) in targets["keys"].items():
        s3 = presigner(access_key, secret_key)
        get = s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": targets["victim_model"]})
        judge(f"{who}: GET the victim's model", *call(urllib.request.Request(get)))
        get = s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": targets["victim_bundle"]})
        judge(f"{who}: GET the victim's bundle", *call(urllib.request.Request(get)))
        put = s3.generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": targets["victim_plant"]})
        judge(f"{who}: PUT into the victim's outputs",
              *call(urllib.request.Request(put, data=b"planted", method="PUT")))
        listing = s3.generate_presigned_url(
            "list_objects_v2", Params={"Bucket": bucket, "Prefix": targets["victim_prefix"]})
        judge(f"{who}: list the victim's prefix", *call(urllib.request.Request(listing)))
        post = s3.generate_presigned_post(bucket, targets["victim_plant"], ExpiresIn=600)
        judge(f"{who}: POST into the victim's outputs",
              *post_form(post["url"], list(post["fields"].items())))

    # 2. POST fields smuggled past the gate with this pod's own upload grant.
    grant = json.load(open("/tfjob/access/upload.json"))
    fields = grant["grants"]["model/"]["fields"]
    allowed = grant["prefix"] + "model/smuggled.txt"
    others = [(name, value) for name, value in fields.items() if name != "key"]
    judge("smuggle: key=<victim>, ..., KEY=<allowed>",
          *post_form(grant["url"], [("key", targets["victim_plant"]), *others, ("KEY", allowed)]))
    judge("smuggle: KEY=<allowed>, ..., key=<victim>",
          *post_form(grant["url"], [("KEY", allowed), *others, ("key", targets["victim_plant"])]))
    judge("smuggle: key twice",
          *post_form(grant["url"], [("key", allowed), *others, ("key", targets["victim_plant"])]))
    judge("smuggle: upper-case policy fields",
          *post_form(grant["url"], [("key", targets["victim_plant"]),
                                    *[(name.upper(), value) for name, value in others]]))
    status, body = post_form(grant["url"], [("key", grant["prefix"] + "model/control.txt"),
                                            *others], b"control")
    report("CONTROL", "own grant: POST into its own model/",
           "ok" if 200 <= status < 300 else "failed", f"{status} {body[:200]!r}")

    # 3. The host's files: the checkout, the services' state.
    for path in targets["host_files"]:
        try:
            with open(path, "rb") as handle:
                handle.read(64)
            report("HOSTILE", f"read {path}", "ALLOWED")
        except OSError as error:
            report("HOSTILE", f"read {path}", "refused", error)
    for path in targets["host_dirs"]:
        try:
            names = os.listdir(path)
            report("HOSTILE", f"list {path}", "ALLOWED" if names else "refused", names[:5])
        except OSError as error:
            report("HOSTILE", f"list {path}", "refused", error)

    # 4. Files another pod keeps in memory-backed and temporary directories.
    for path in targets["victim_files"]:
        try:
            with open(path) as handle:
                report("HOSTILE", f"read {path}", "ALLOWED", handle.read(100))
        except OSError as error:
            report("HOSTILE", f"read {path}", "refused", error)
        try:
            with open(path, "w") as handle:  # a private directory takes it as the pod's own
                handle.write("overwritten by a hostile program")
            report("WROTE", path, "own copy")
        except OSError as error:
            report("WROTE", path, "refused", error)

    # 5. Another tenant's training port.
    try:
        with socket.create_connection((targets["victim_ip"], targets["victim_port"]), timeout=5):
            report("HOSTILE", "connect to the victim's pod", "ALLOWED")
    except OSError as error:
        report("HOSTILE", "connect to the victim's pod", "refused", error)

    os.makedirs(os.environ["MODEL_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["MODEL_DIR"], "model.json"), "w") as handle:
        json.dump({"hostile": True}, handle)
    print("HOSTILE-DONE", flush=True)
    '''
)


def write_hostile_bundle(folder: Path, targets: str) -> Path:
    """The hostile program's bundle, `targets` (JSON text) as its data/targets.json."""
    from runtime.bundle import write_bundle

    src = folder / "hostile-src"
    (src / "code").mkdir(parents=True, exist_ok=True)
    (src / "data").mkdir(parents=True, exist_ok=True)
    (src / "code" / "train.py").write_text(HOSTILE_PROGRAM)
    (src / "data" / "targets.json").write_text(targets)
    out = folder / "hostile.tar.gz"
    write_bundle(src, out, "hostile")
    return out
