"""What an S3 request needs a policy to allow: its IAM action and resource, read from the
request as an S3 server authorises it (AWS's "Actions, resources and condition keys for
Amazon S3"), and whether a compose policy (``include/config/minio-init/*.json``) allows it."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from urllib.parse import parse_qs

POLICIES = Path(__file__).resolve().parents[1] / "include" / "config" / "minio-init"
Need = tuple[str, str]  # (action, resource ARN)


def needs(method: str, path: str, query: str, body: bytes, buckets: dict[str, str]) -> list[Need]:
    """The (action, resource) pairs one request needs; ``buckets`` maps the test's bucket
    names to the deployment's (``inbox``, ``kb-artifacts``)."""
    bucket, _, key = path.lstrip("/").partition("/")
    bucket = buckets.get(bucket, bucket)
    q = parse_qs(query, keep_blank_values=True)
    arn_bucket, arn_object = f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/{key}"
    if not key:
        if method == "POST" and "delete" in q:  # DeleteObjects: each named object, version or not
            out = []
            for obj in re.findall(rb"<Object>(.*?)</Object>", body, re.S):
                name = re.search(rb"<Key>(.*?)</Key>", obj, re.S).group(1).decode()
                action = "s3:DeleteObjectVersion" if b"<VersionId>" in obj else "s3:DeleteObject"
                out.append((action, f"arn:aws:s3:::{bucket}/{name}"))
            return out
        if method == "PUT":
            return [("s3:PutBucketVersioning" if "versioning" in q else "s3:CreateBucket", arn_bucket)]
        for name, action in (("location", "s3:GetBucketLocation"), ("versioning", "s3:GetBucketVersioning"),
                             ("versions", "s3:ListBucketVersions"), ("uploads", "s3:ListBucketMultipartUploads"),
                             ("policy", "s3:GetBucketPolicy"), ("lifecycle", "s3:GetLifecycleConfiguration")):
            if name in q:
                return [(action, arn_bucket)]
        return [("s3:ListBucket", arn_bucket)]  # a listing, or HEAD bucket
    versioned = "versionId" in q
    if method in ("GET", "HEAD"):
        if "uploadId" in q:
            return [("s3:ListMultipartUploadParts", arn_object)]
        return [("s3:GetObjectVersion" if versioned else "s3:GetObject", arn_object)]
    if method in ("PUT", "POST"):
        return [("s3:PutObject", arn_object)]  # a put, a multipart upload's creation, parts, completion
    if method == "DELETE":
        if "uploadId" in q:
            return [("s3:AbortMultipartUpload", arn_object)]
        return [("s3:DeleteObjectVersion" if versioned else "s3:DeleteObject", arn_object)]
    raise ValueError(f"no S3 action known for {method} {path}?{query}")


def policy(name: str) -> list[dict]:
    return json.loads((POLICIES / f"{name}.json").read_text())["Statement"]


def allows(statements: list[dict], need: Need) -> bool:
    action, resource = need
    return any(s["Effect"] == "Allow" and action in s["Action"] and any(fnmatch.fnmatchcase(resource, r)
                                                                       for r in s["Resource"])
               for s in statements)


def granted(statements: list[dict]) -> set[tuple[str, str]]:
    """(action, resource pattern) pairs the policy allows."""
    return {(a, r) for s in statements if s["Effect"] == "Allow" for a in s["Action"] for r in s["Resource"]}


def used(statements: list[dict], made: set[Need]) -> set[tuple[str, str]]:
    """The policy's (action, resource pattern) pairs some request in ``made`` needed."""
    return {(a, r) for a, r in granted(statements)
            if any(a == action and fnmatch.fnmatchcase(resource, r) for action, resource in made)}
