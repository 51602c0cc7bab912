from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gapless.ids import MAX_CLUSTER_ID, MAX_LOCAL, decode_id, encode_id


@given(st.integers(0, MAX_CLUSTER_ID), st.integers(0, MAX_LOCAL))
def test_encode_decode_round_trip(cluster: int, local: int) -> None:
    value = encode_id(cluster, local)
    assert 0 <= value < 2**63  # always a positive bigint
    assert decode_id(value) == (cluster, local)


@given(st.integers(0, MAX_CLUSTER_ID), st.integers(0, MAX_CLUSTER_ID),
       st.integers(0, MAX_LOCAL), st.integers(0, MAX_LOCAL))
def test_two_clusters_never_collide(c1: int, c2: int, l1: int, l2: int) -> None:
    if (c1, l1) != (c2, l2):
        assert encode_id(c1, l1) != encode_id(c2, l2)


@pytest.mark.parametrize(("cluster", "local"), [(-1, 0), (MAX_CLUSTER_ID + 1, 0), (0, -1),
                                                (0, MAX_LOCAL + 1)])
def test_out_of_range_parts_are_refused(cluster: int, local: int) -> None:
    with pytest.raises(ValueError, match="must be between"):
        encode_id(cluster, local)


@pytest.mark.parametrize("value", [-1, 2**63])
def test_decode_refuses_non_ids(value: int) -> None:
    with pytest.raises(ValueError, match="not a gapless id"):
        decode_id(value)
