"""Tree attention: visibility masks, positions, batching, and equality with sequential decoding."""

import numpy as np
import pytest
import torch

from common.modeling.attention import (build_batch, segment_mask, segment_positions, tree_attention, tree_attention_for,
                                      visible_columns)
from common.modeling.runner import PREFILL_ALONE, batches, forward_segments
from common.tree import ROOT, path_to

EMPTY_I64, EMPTY_I32 = np.zeros(0, np.int64), np.zeros(0, np.int32)


class TestSegmentMask:
    def test_hand_worked(self):
        """Prefix 2, pending 2, tree (n0, n1 child of n0, n2): committed columns for all,
        pending causal, tree nodes see all pending plus their ancestors; padding column stays False."""
        expected = np.array([
            # prefix | pending | n0 n1 n2 | pad
            [1, 1, 1, 0, 0, 0, 0, 0],
            [1, 1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0, 0, 1, 0],
        ], dtype=bool)
        np.testing.assert_array_equal(segment_mask(2, 2, np.array([ROOT, 0, ROOT]), 8), expected)

    def test_positions(self):
        """Pending tokens count up from the prefix; nodes sit at last pending position + depth."""
        np.testing.assert_array_equal(segment_positions(2, 2, np.array([ROOT, 0, ROOT])), [2, 3, 4, 5, 4])


class TestBuildBatch:
    def test_padding(self):
        """Shorter segments are right-padded; padding rows attend to column 0 only."""
        tok, pos, mask = build_batch([3, 0], [[7], [1, 2, 3]], [np.array([8, 9]), EMPTY_I64],
                                     [np.array([ROOT, ROOT]), EMPTY_I32])
        assert tok.shape == (2, 3) and mask.shape == (2, 1, 3, 6)
        assert tok.tolist() == [[7, 8, 9], [1, 2, 3]]
        assert pos.tolist() == [[3, 4, 4], [0, 1, 2]]
        np.testing.assert_array_equal(mask[1, 0, :, :3].numpy(), np.tril(np.ones((3, 3), bool)))
        assert not mask[1, 0, :, 3:].any()
        assert mask[0, 0, 2].tolist() == [True, True, True, True, False, True]

    def test_long_segments_run_alone(self):
        """Segments longer than PREFILL_ALONE get their own batch; short ones share one."""
        assert batches([1, PREFILL_ALONE + 1, 5, PREFILL_ALONE]) == [[0, 2, 3], [1]]


class TestTreeForward:
    def test_tree_node_equals_sequential_decoding(self, tiny_main):
        """The hidden state of every tree node equals the last hidden of prompt + root + path
        decoded sequentially (the tree only changes visibility, not the math)."""
        cache = tiny_main.new_cache(2, 64)
        prompt, root = [11, 22, 33, 44, 55], 66
        parents = np.array([ROOT, ROOT, 0, 0, 2, 1], np.int32)
        tokens = np.array([101, 102, 103, 104, 105, 106], np.int64)
        a, b = cache.allocate(), cache.allocate()
        forward_segments(tiny_main, cache, [a], [prompt], [EMPTY_I64], [EMPTY_I32])
        cache.commit(a, list(range(len(prompt))))
        tree_h = forward_segments(tiny_main, cache, [a], [[root]], [tokens], [parents])[0]
        for i in range(len(tokens)):
            seq = prompt + [root] + [int(tokens[j]) for j in path_to(parents, i)]
            cache.truncate(b, 0)
            h = forward_segments(tiny_main, cache, [b], [seq], [EMPTY_I64], [EMPTY_I32])[0]
            torch.testing.assert_close(tree_h[1 + i], h[-1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(tree_h[0], h[len(prompt)], atol=1e-4, rtol=1e-4)

    def test_batched_equals_alone(self, tiny_main):
        """Several sequences with different prefix lengths in one forward match one at a time."""
        cache = tiny_main.new_cache(6, 64)
        prompts = [[5, 6, 7], list(range(100, 117)), [9]]
        pend = [[8], [3, 4], [10, 11, 12]]
        trees = [(np.array([1, 2, 3]), np.array([ROOT, 0, 0])), (EMPTY_I64, EMPTY_I32),
                 (np.array([4, 5]), np.array([ROOT, 0]))]
        slots = [[cache.allocate() for _ in prompts] for _ in range(2)]
        for group in slots:
            for s, p in zip(group, prompts):
                forward_segments(tiny_main, cache, [s], [p], [EMPTY_I64], [EMPTY_I32])
                cache.commit(s, list(range(len(p))))
        together = forward_segments(tiny_main, cache, slots[0], pend, [t for t, _ in trees], [p for _, p in trees])
        for i, s in enumerate(slots[1]):
            alone = forward_segments(tiny_main, cache, [s], [pend[i]], [trees[i][0]], [trees[i][1]])[0]
            torch.testing.assert_close(together[i], alone, atol=1e-4, rtol=1e-4)

    def test_no_room(self, tiny_main):
        """A segment that does not fit in its slot raises CacheFullError before any write."""
        from common.modeling.kv_cache import CacheFullError
        cache = tiny_main.new_cache(1, 4)
        s = cache.allocate()
        with pytest.raises(CacheFullError):
            forward_segments(tiny_main, cache, [s], [[1, 2, 3]], [np.array([4, 5])], [np.array([ROOT, 0])])

    def test_batch_wider_than_slot(self, tiny_main):
        """A sequence near the end of its slot batched with a longer segment (padding past
        max_len) still runs and matches running alone."""
        cache = tiny_main.new_cache(3, 64)
        a, b, c = cache.allocate(), cache.allocate(), cache.allocate()
        for s in (a, c):
            forward_segments(tiny_main, cache, [s], [list(range(1, 61))], [EMPTY_I64], [EMPTY_I32])
            cache.commit(s, list(range(60)))
        tree = (np.array([1, 2], np.int64), np.array([ROOT, 0], np.int32))
        out = forward_segments(tiny_main, cache, [a, b], [[7], list(range(200, 220))],
                               [tree[0], EMPTY_I64], [tree[1], EMPTY_I32])
        alone = forward_segments(tiny_main, cache, [c], [[7]], [tree[0]], [tree[1]])[0]
        assert out[0].shape == (3, tiny_main.spec.hidden_size) and out[1].shape[0] == 20
        torch.testing.assert_close(out[0], alone, atol=1e-4, rtol=1e-4)


def _cache_pair(dtype, head_dim=16, heads=4, lengths=(20, 30)):
    """A 1-layer cache with two random slots of ``lengths`` committed rows, and a batch over them:
    slot 0 verifies 1 pending token plus a 3-node chain, slot 1 decodes 2 pending tokens.
    ``heads`` query heads on 2 KV heads of ``head_dim``."""
    from common.modeling.kv_cache import KVCache
    g = torch.Generator().manual_seed(7)
    cache = KVCache(1, 2, max(lengths) + 34, 2, head_dim, dtype, "cpu")
    slots = [cache.allocate(), cache.allocate()]
    cache.k.copy_(torch.randn(cache.k.shape, generator=g))
    cache.v.copy_(torch.randn(cache.v.shape, generator=g))
    cache.lengths[slots[0]], cache.lengths[slots[1]] = lengths
    _, _, mask = build_batch(list(lengths), [[1], [2, 3]], [np.array([5, 6, 7]), EMPTY_I64],
                             [np.array([ROOT, 0, 1]), EMPTY_I32])
    q = torch.randn(2, mask.shape[2], heads, head_dim, generator=g).to(dtype)
    return cache, slots, mask, q


# (head_dim, query heads): AVX-512 loops (D % 16 == 0, D <= 128; 3 query heads per KV head leaves
# one head of the last pair alone), AVX2 loops (D % 64 == 0, D <= 128: 64 x 7 heads per KV head is
# the 0.5B draft's shape, 128 x 3 the 1.5B main's group size halved) and the portable loops (D = 24; D = 16
# without AVX-512)
SHAPES = [(16, 4), (128, 6), (64, 14), (24, 4)]
# committed rows of the two slots: fewer than one AVX2 block of 32 columns, and several blocks with a
# remainder of 8-column and single-column dot products
LENGTHS = [(20, 30), (75, 110)]


class TestVisibleColumns:
    def test_csr_lists_each_rows_columns_ascending_and_can_keep_only_real_rows(self):
        """visible_columns gives each query row's allowed KV columns (below max_len) in ascending
        order as CSR, for all B * T rows or only the given flat row indices (a ragged batch's real rows)."""
        mask = torch.zeros(2, 1, 2, 5, dtype=torch.bool)
        mask[0, 0, 0, [0, 2]] = True
        mask[0, 0, 1, [0, 1, 4]] = True
        mask[1, 0, 0, [3]] = True  # row 3 (b=1, t=1) sees nothing
        cols, offsets = visible_columns(mask, max_len=4)  # column 4 is past max_len
        assert offsets.tolist() == [0, 2, 4, 5, 5] and cols.tolist() == [0, 2, 0, 1, 3]
        cols, offsets = visible_columns(mask, max_len=5, rows=torch.tensor([1, 2]))
        assert offsets.tolist() == [0, 3, 4] and cols.tolist() == [0, 1, 4, 3]
        assert cols.dtype == torch.int32 and offsets.dtype == torch.int64


class TestExactAttention:
    @pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
    @pytest.mark.parametrize("head_dim,heads", SHAPES)
    @pytest.mark.parametrize("lengths", LENGTHS)
    def test_matches_sdpa(self, dtype, tol, head_dim, heads, lengths):
        """ExactAttention computes the same tree attention as SDPA (grouped-query heads, a tree and a padded segment) within float rounding, on its vectorized and portable paths."""
        from common.modeling.attention import ExactAttention, tree_attention
        from common.modeling.native import library
        cache, slots, mask, q = _cache_pair(dtype, head_dim, heads, lengths)
        ref = tree_attention(q, cache, 0, slots, mask)
        out = ExactAttention(library(), mask, slots, cache.max_len)(q, cache, 0, slots, mask)
        assert out.shape == ref.shape and out.dtype == dtype
        assert torch.allclose(out[0].float(), ref[0].float(), atol=tol) and torch.allclose(out[1, :2].float(), ref[1, :2].float(), atol=tol)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    @pytest.mark.parametrize("head_dim,heads", SHAPES)
    @pytest.mark.parametrize("lengths", LENGTHS)
    def test_a_row_alone_is_bit_identical(self, dtype, head_dim, heads, lengths):
        """The pending token's row computed alone equals, bit for bit, the same row inside the pass with its tree."""
        from common.modeling.attention import ExactAttention
        from common.modeling.native import library
        cache, slots, mask, q = _cache_pair(dtype, head_dim, heads, lengths)
        both = ExactAttention(library(), mask, slots, cache.max_len)(q, cache, 0, slots, mask)
        alone_mask = mask[:1, :, :1, :lengths[0] + 1]
        alone = ExactAttention(library(), alone_mask, slots[:1], cache.max_len)(
            q[:1, :1].contiguous(), cache, 0, slots[:1], alone_mask)
        assert torch.equal(alone[0, 0], both[0, 0])

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    @pytest.mark.parametrize("head_dim,heads", SHAPES)
    def test_every_row_of_a_tree_and_a_prefill_chunk_equals_itself_alone(self, dtype, head_dim, heads):
        """Each row of a branching tree after 75 committed columns, and of a 40-token prefill chunk after 70 (rows of
        one slot that the AVX2 loops attend as a group, widening shared key/value blocks once), equals bit for bit
        the same row computed alone."""
        from common.modeling.attention import ExactAttention
        from common.modeling.native import library
        from common.modeling.kv_cache import KVCache
        g = torch.Generator().manual_seed(3)
        cache = KVCache(1, 2, 160, 2, head_dim, dtype, "cpu")
        slots = [cache.allocate(), cache.allocate()]
        cache.k.copy_(torch.randn(cache.k.shape, generator=g))
        cache.v.copy_(torch.randn(cache.v.shape, generator=g))
        parents = np.array([ROOT, ROOT, 0, 0, 1, 2, 5], np.int32)
        _, _, mask = build_batch([75, 70], [[1], list(range(2, 42))], [np.arange(7), EMPTY_I64], [parents, EMPTY_I32])
        q = torch.randn(2, mask.shape[2], heads, head_dim, generator=g).to(dtype)
        pass_out = ExactAttention(library(), mask, slots, cache.max_len)(q, cache, 0, slots, mask)
        for b, t in [(0, t) for t in range(8)] + [(1, t) for t in (0, 1, 17, 39)]:
            row_mask = mask[b:b + 1, :, t:t + 1]
            alone = ExactAttention(library(), row_mask, slots[b:b + 1], cache.max_len)(
                q[b:b + 1, t:t + 1].contiguous(), cache, 0, slots[b:b + 1], row_mask)
            assert torch.equal(alone[0, 0], pass_out[b, t]), (b, t)

    def test_refuses_other_dtypes(self):
        """float16 tensors (no kernel for them) raise ValueError instead of being read at the wrong width."""
        from common.modeling.attention import ExactAttention
        from common.modeling.native import library
        cache, slots, mask, q = _cache_pair(torch.float32)
        with pytest.raises(ValueError, match="bf16 or fp32"):
            ExactAttention(library(), mask, slots, cache.max_len)(q.half(), cache, 0, slots, mask)


def test_cpu_passes_attend_by_tree_attention():
    """A forward pass whose mask is on the CPU attends by tree_attention (SDPA); only a CUDA mask
    builds the Triton kernel's per-pass state (covered by test_triton_attention's model case)."""
    _, _, mask = build_batch([0], [[1]], [np.array([2, 3])], [np.array([-1, 0], np.int32)])
    assert tree_attention_for(mask, None, [0]) is tree_attention
