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
