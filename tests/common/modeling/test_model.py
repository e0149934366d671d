"""DecoderModel's ragged batches: padding rows skip the matmuls without changing any real row."""

from __future__ import annotations

import numpy as np
import torch

from common.modeling.model import DecoderModel, Ragged
from common.modeling.runner import forward_segments
from common.modeling.tiny import tiny_spec, tiny_weights

PENDING = [[5], [7, 8, 9], [11]]
TREES = [(np.array([], np.int64), np.array([], np.int32)),
         (np.array([3, 4], np.int64), np.array([-1, 0], np.int32)),
         (np.array([20, 21, 22, 23, 24], np.int64), np.array([-1, -1, 0, 0, 2], np.int32))]


def run(model: DecoderModel, idx: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Forward sequences ``idx`` (after a shared 6-token prefix each) in one batch."""
    cache = model.new_cache(4, 64)
    slots = [cache.allocate() for _ in idx]
    for s in slots:
        forward_segments(model, cache, [s], [[1, 2, 3, 4, 5, 6]], [np.zeros(0, np.int64)], [np.zeros(0, np.int32)])
        cache.commit(s, list(range(6)))
    out = forward_segments(model, cache, slots, [PENDING[i] for i in idx], [TREES[i][0] for i in idx],
                           [TREES[i][1] for i in idx])
    return out, cache.k[:, slots]


class TestRagged:
    def test_a_ragged_batch_equals_each_sequence_alone(self):
        """Three segments of 1, 5 and 6 rows in one batch give each sequence the hidden states and
        the K/V rows it gets when run alone (fp32)."""
        spec = tiny_spec()
        model = DecoderModel(spec, tiny_weights(spec, seed=3), torch.float32)
        batched, k_batched = run(model, [0, 1, 2])
        for i in range(3):
            alone, k_alone = run(model, [i])
            n = len(PENDING[i]) + len(TREES[i][0])
            assert batched[i].shape == (n, spec.hidden_size)
            torch.testing.assert_close(batched[i], alone[0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(k_batched[:, i, :6 + n], k_alone[:, 0, :6 + n], rtol=1e-5, atol=1e-5)

    def test_projections_see_only_real_rows(self, monkeypatch):
        """The batch of 1 + 5 + 6 rows sends 12 rows, not 3 x 6, through every projection."""
        import common.modeling.model as model_mod
        spec = tiny_spec()
        model = DecoderModel(spec, tiny_weights(spec, seed=3), torch.float32)
        seen, real = [], model_mod.linear
        cache = model.new_cache(4, 64)
        slots = [cache.allocate() for _ in range(3)]
        monkeypatch.setattr(model_mod, "linear", lambda x, w, b=None: seen.append(x.shape[:-1].numel()) or real(x, w, b))
        forward_segments(model, cache, slots, PENDING, [t for t, _ in TREES], [p for _, p in TREES])
        assert set(seen) == {12} and len(seen) == 4 * spec.num_layers

    def test_packing_only_when_there_is_padding(self):
        """Equal lengths (or none given) keep the padded layout; otherwise pack/unpack round-trips
        the real rows and zeros the padding."""
        assert Ragged.of(None, 2, 3, "cpu") is None and Ragged.of([3, 3], 2, 3, "cpu") is None
        rag = Ragged.of([1, 3], 2, 3, "cpu")
        x = torch.arange(6.0).view(2, 3, 1)
        packed = rag.pack(x)
        assert packed.flatten().tolist() == [0.0, 3.0, 4.0, 5.0]
        assert rag.unpack(packed).flatten().tolist() == [0.0, 0.0, 0.0, 3.0, 4.0, 5.0]
        assert [t.flatten().tolist() for t in rag.segments(packed)] == [[0.0], [3.0, 4.0, 5.0]]
