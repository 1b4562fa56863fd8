"""ObjectStore.get_bytes with a cap, against the real S3 server: what the page endpoint reads."""

from __future__ import annotations

import pytest

from kb.errors import ObjectTooLarge


def test_an_object_over_the_cap_is_refused_and_one_at_the_cap_is_read(kb_env):
    store, bucket = kb_env["store"], kb_env["inbox"]
    store.put_bytes(bucket, "capped.bin", b"x" * 2048)
    assert store.get_bytes(bucket, "capped.bin", max_bytes=2048) == b"x" * 2048
    with pytest.raises(ObjectTooLarge):
        store.get_bytes(bucket, "capped.bin", max_bytes=2047)
    assert len(store.get_bytes(bucket, "capped.bin")) == 2048  # no cap: read whole


def test_a_new_bucket_takes_one_weed_volume_not_seven(s3_server):
    """weed grows seven volumes for a new collection (every bucket is one) unless master.toml
    says otherwise; at seven a test session ran out of volumes on a disk with 17 GB free
    (kb_dev.stack.s3.write_weed_master_config)."""
    import uuid

    from kb.objectstore import ObjectStore

    volumes = s3_server["settings"].state_dir / "weed"
    store = ObjectStore.connect(s3_server["endpoint"], s3_server["access_key"], s3_server["secret_key"])
    before = len(list(volumes.glob("*.dat")))
    buckets = [f"growth-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    for bucket in buckets:
        store.ensure_bucket(bucket)
        store.put_bytes(bucket, "one.bin", b"x" * 1024)
    assert len(list(volumes.glob("*.dat"))) - before == len(buckets)
