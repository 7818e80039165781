import pytest

from scoring.state.token_blocks import root_key, token_block_keys


def test_keys_chain_full_blocks_only() -> None:
    root = root_key("m")
    keys = token_block_keys(list(range(40)), 16, root)
    assert len(keys) == 2  # the 8 tokens past the second block make no key
    # A block's key names the whole prefix: the second block keyed alone from the first's
    # key is the same key.
    assert token_block_keys(list(range(16, 32)), 16, keys[0]) == (keys[1],)


def test_keys_differ_by_model_tokens_and_position() -> None:
    ids = list(range(32))
    a = token_block_keys(ids, 16, root_key("a"))
    assert a != token_block_keys(ids, 16, root_key("b"))
    assert a[0] != token_block_keys([0, *ids[1:]][::-1], 16, root_key("a"))[0]
    # Same second block after a different first block: a different key.
    other = token_block_keys([99] * 16 + ids[16:], 16, root_key("a"))
    assert other[1] != a[1]


def test_large_token_ids_and_bad_block_size() -> None:
    assert len(token_block_keys([2**31, 2**32 - 1], 2, 0)) == 1
    assert token_block_keys([1, 2, 3], 4, 0) == ()
    with pytest.raises(ValueError):
        token_block_keys([1], 0, 0)
