"""Logit processing shared by draft and main model: temperature, top-k, top-p, greedy, penalties."""

import pytest
import torch

from common.modeling import sampling
from common.modeling.sampling import apply_penalties, greedy, probs_from_logits


class TestProbsFromLogits:
    def test_temperature(self):
        """Without truncation the result is softmax(logits / temperature)."""
        lg = torch.tensor([[1.0, 2.0, 3.0]])
        torch.testing.assert_close(probs_from_logits(lg, 0.5), torch.softmax(lg / 0.5, -1))

    def test_top_k(self):
        """top_k keeps exactly the k largest logits, renormalised."""
        lg = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
        p = probs_from_logits(lg, 1.0, top_k=2)
        e = torch.exp(torch.tensor(1.0))
        torch.testing.assert_close(p, torch.tensor([[0.0, e / (e + 1), 0.0, 1 / (e + 1)]]))

    def test_top_p_smallest_prefix(self):
        """top_p keeps the smallest set of most likely tokens whose mass reaches top_p."""
        lg = torch.log(torch.tensor([[0.1, 0.5, 0.15, 0.25]]))
        p = probs_from_logits(lg, 1.0, top_p=0.6)  # 0.5 < 0.6 <= 0.5 + 0.25
        torch.testing.assert_close(p, torch.tensor([[0.0, 0.5 / 0.75, 0.0, 0.25 / 0.75]]))
        p = probs_from_logits(lg, 1.0, top_p=0.3)  # the top token alone already reaches it
        torch.testing.assert_close(p, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))

    @pytest.mark.parametrize("spread", [0.1, 8.0])
    def test_top_p_accelerator_path_equals_cpu_shortcut(self, monkeypatch, spread):
        """The sync-free full sort (accelerators) and the CPU candidate shortcut keep the same
        nucleus, for peaked rows and for flat rows whose best candidates hold < top_p."""
        gen = torch.Generator().manual_seed(0)
        lg = torch.randn(3, 5000, generator=gen) * spread  # [N, V]; spread 0.1: 2048 candidates < 0.9
        cpu = probs_from_logits(lg, 1.0, top_p=0.9)
        monkeypatch.setattr(sampling, "reads_are_free", lambda t: False)
        torch.testing.assert_close(probs_from_logits(lg, 1.0, top_p=0.9), cpu)

    def test_greedy_temperature_refused(self):
        """temperature <= 0 raises ValueError (greedy uses argmax)."""
        with pytest.raises(ValueError):
            probs_from_logits(torch.zeros(1, 3), 0.0)


class TestGreedy:
    def test_exact_tie_lowest_id(self):
        """With an exact tie the lowest token id wins, row by row."""
        lg = torch.zeros(2, 10)
        lg[0, [3, 7]] = 5.0
        lg[1, [9, 2, 4]] = 1.0
        assert greedy(lg).tolist() == [3, 2]


class TestPenalties:
    def test_repetition_presence_frequency(self):
        """Repetition divides positive / multiplies negative seen logits; presence/frequency subtract."""
        lg = torch.tensor([[2.0, -2.0, 1.0]])
        counts = torch.tensor([[2.0, 1.0, 0.0]])
        torch.testing.assert_close(apply_penalties(lg, counts, 0.0, 0.0, 2.0), torch.tensor([[1.0, -4.0, 1.0]]))
        torch.testing.assert_close(apply_penalties(lg, counts, 0.5, 0.25, 1.0), torch.tensor([[1.0, -2.75, 1.0]]))
        assert apply_penalties(lg, counts, 0.0, 0.0, 1.0) is lg
