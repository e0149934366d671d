"""Tree acceptance: the one walk (greedy and seeded sampling), exact ties, and the general
residual (multi-candidate rejection) sampler kept for a sampling draft."""

import numpy as np
import pytest
import torch

from common.modeling.sampling import draw_tokens, greedy, position_noise, probs_from_logits
from common.tree import ROOT, children
from services.verifier.acceptance import accept_walk, residual_accept

# Worked tree (tokens in brackets):   root
#                                   /   |   \
#                               n0[1] n1[0] n2[7]
#                               /  \     |
#                           n3[2] n4[0] n5[3]
TOKENS = np.array([1, 0, 7, 2, 0, 3], np.int64)
PARENTS = np.array([ROOT, ROOT, ROOT, 0, 0, 1], np.int32)
KIDS = children(PARENTS)


class TestAcceptWalk:
    def test_walks_matching_children(self):
        """The accepted path follows children equal to the main model's argmax; the bonus is
        the argmax at the last accepted node."""
        target = np.array([1, 0, 9, 9, 9, 5, 9])  # root wants 1 (n0), n0 wants 0 (n4), n4 wants 5
        assert accept_walk(TOKENS, KIDS, target) == ([0, 4], 5)

    def test_nothing_accepted(self):
        """When no depth-1 token matches, the bonus is the root argmax (plain decoding)."""
        assert accept_walk(TOKENS, KIDS, np.array([4, 0, 0, 0, 0, 0, 0])) == ([], 4)
        assert accept_walk(TOKENS[:0], children(PARENTS[:0]), np.array([6])) == ([], 6)

    def test_full_chain(self):
        """A chain fully accepted ends with the bonus from its leaf."""
        toks, par = np.array([5, 6, 7]), np.array([ROOT, 0, 1])
        assert accept_walk(toks, children(par), np.array([5, 6, 7, 8])) == ([0, 1, 2], 8)


class TestExactTies:
    def test_tie_same_token_in_tree_and_plain(self):
        """With an exact logit tie, plain decoding (sampling.greedy) and tree acceptance both
        commit the lowest tied id, whichever order the draft proposed the tied tokens in."""
        V = 16
        lg = torch.full((3, V), -1.0)
        lg[0, [7, 3]] = 4.0  # root: exact tie between 3 and 7
        lg[1, [9, 2]] = 2.5  # node 0 (token 7): tie 2 / 9
        lg[2, [12, 11]] = 1.0  # node 1 (token 3): tie 11 / 12
        assert greedy(lg[:1]).item() == 3
        toks, par = np.array([7, 3]), np.array([ROOT, ROOT])
        accepted, bonus = accept_walk(toks, children(par), greedy(lg).numpy())
        assert [int(toks[a]) for a in accepted] == [3] and bonus == greedy(lg[2:]).item() == 11


def _exact(p_rows: torch.Tensor) -> dict:
    """Exact distribution of (first token, second token if the first was a tree child)."""
    out = {}
    root_kids = {int(TOKENS[c]): c for c in KIDS[0]}
    for x in range(p_rows.shape[1]):
        px = p_rows[0, x].item()
        if px == 0:
            continue
        if x in root_kids:
            for y in range(p_rows.shape[1]):
                if p_rows[1 + root_kids[x], y] > 0:
                    out[(x, y)] = px * p_rows[1 + root_kids[x], y].item()
        else:
            out[(x, None)] = px
    return out


def _outcome(accepted: list[int], bonus: int):
    """First two committed tokens (the second only when the first was an accepted node)."""
    toks = [int(TOKENS[a]) for a in accepted] + [bonus]
    return (toks[0], toks[1] if accepted else None)


def _naive_accept(tokens, kids, probs, gen):
    """A deliberately wrong sampler (bonus from the unmodified p after rejections): the
    statistical test must tell it apart from residual_accept."""
    node, path = ROOT, []
    while True:
        p = probs[node + 1]
        nxt = next((c for c in kids[node + 1] if torch.rand((), generator=gen).item() < p[int(tokens[c])]), None)
        if nxt is None:
            return path, int(torch.multinomial(p, 1, generator=gen).item())
        path.append(nxt)
        node = nxt


def _tv(sampler, p_rows, n, seed):
    """Total-variation distance between n sampled outcomes and the exact distribution,
    plus the bound 0.5 * sum sqrt(p (1 - p) / n) on its expectation."""
    exact = _exact(p_rows)
    gen = torch.Generator().manual_seed(seed)
    counts: dict = {}
    for _ in range(n):
        o = _outcome(*sampler(TOKENS, KIDS, p_rows, gen))
        counts[o] = counts.get(o, 0) + 1
    keys = set(exact) | set(counts)
    tv = 0.5 * sum(abs(counts.get(k, 0) / n - exact.get(k, 0.0)) for k in keys)
    bound = 0.5 * sum(np.sqrt(q * (1 - q) / n) for q in exact.values())
    return tv, bound, set(counts) - set(exact)


def _logits(V: int) -> torch.Tensor:
    """Main-model logits ``[n + 1, V]`` for the worked tree."""
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(len(TOKENS) + 1, V, generator=g) * 0.5
    logits[0, [1, 0, 2]] += 1.0  # the draft's depth-1 guesses are plausible but not certain
    logits[1, [2, 0]] += 1.0
    return logits


def _rows(V: int, **kw) -> torch.Tensor:
    """Main-model distributions ``[n + 1, V]`` for the worked tree at temperature 0.9."""
    return probs_from_logits(_logits(V), 0.9, **kw)


ROW_DEPTH = torch.tensor([0, 1, 1, 1, 2, 2, 2])  # root, then the worked tree's nodes
ROOT_POSITION = 40  # absolute position of the token drawn at the root


def _walk_sampler(kw):
    """The serving path as a sampler: draw one token per row with the position-keyed
    exponential race (a fresh seed per call), then walk."""
    logits = _logits(12)
    seeds = iter(range(10**9))

    def sample(tokens, kids, _probs, _gen):
        drawn = draw_tokens(logits, 0.9, kw.get("top_k", 0), kw.get("top_p", 1.0), next(seeds),
                            [ROOT_POSITION, ROOT_POSITION + 1, ROOT_POSITION + 2], ROW_DEPTH)
        return accept_walk(tokens, kids, drawn.numpy())
    return sample


class TestDrawnWalk:
    @pytest.mark.parametrize("kw", [{"top_p": 0.6}, {"top_k": 5}, {}], ids=["top_p=0.6", "top_k=5", "plain"])
    def test_matches_target_distribution(self, kw):
        """Drawing one token per node by the exponential race and walking the tree commits
        (first, second) tokens with the main model's exact distribution (total variation
        within twice the sampling noise at 2000 draws), never outside top-p/top-k."""
        p_rows = _rows(12, **kw)
        tv, bound, impossible = _tv(_walk_sampler(kw), p_rows, 2000, seed=0)
        assert not impossible
        assert tv <= 2 * bound, (tv, bound)

    def test_noise_is_a_function_of_seed_and_position(self):
        """A position's noise row is the same whichever other positions are drawn with it,
        and differs between positions and between seeds."""
        a = position_noise(5, [10, 11, 12], 64, "cpu")
        assert torch.equal(a[1], position_noise(5, [11], 64, "cpu")[0])
        assert not torch.equal(a[0], a[1])
        assert not torch.equal(a[0], position_noise(6, [10], 64, "cpu")[0])

    def test_greedy_rows_are_argmax(self):
        """At temperature 0 the drawn token of every row is its argmax (no noise)."""
        logits = _logits(12)
        assert torch.equal(draw_tokens(logits, 0.0, 0, 1.0, 3, [0, 1, 2], ROW_DEPTH), greedy(logits))


class TestResidualAccept:
    @pytest.mark.parametrize("kw", [{"top_p": 0.6}, {"top_k": 5}], ids=["top_p=0.6", "top_k=5"])
    def test_matches_target_distribution(self, kw):
        """The first two committed tokens follow the main model's distribution exactly: the
        total-variation distance to the target stays within twice its expected sampling
        noise and shrinks as the sample count grows; tokens outside top-p/top-k never appear."""
        p_rows = _rows(12, **kw)
        assert (p_rows[0] > 0).sum() >= 3 and p_rows[0, 7] == 0  # n2's token is filtered out
        tvs = []
        for n in (500, 2000, 8000):
            tv, bound, impossible = _tv(residual_accept, p_rows, n, seed=n)
            assert not impossible
            assert tv <= 2 * bound, (n, tv, bound)
            tvs.append(tv)
        assert tvs[-1] < tvs[0]

    def test_detects_a_biased_sampler(self):
        """The same statistic rejects a sampler that skips the residual renormalisation."""
        p_rows = _rows(12, top_p=0.6)
        tv, bound, _ = _tv(_naive_accept, p_rows, 8000, seed=1)
        assert tv > 4 * bound

    def test_seeded_reproducible(self):
        """The same generator seed gives the same accepted path and bonus."""
        p_rows = _rows(12, top_k=5)
        a = [residual_accept(TOKENS, KIDS, p_rows, torch.Generator().manual_seed(s)) for s in range(20)]
        b = [residual_accept(TOKENS, KIDS, p_rows, torch.Generator().manual_seed(s)) for s in range(20)]
        assert a == b and len({str(x) for x in a}) > 1

    def test_certain_token_always_accepted(self):
        """A candidate with probability 1 is always accepted (top_k=1 equals greedy)."""
        p_rows = torch.zeros(len(TOKENS) + 1, 12)
        p_rows[:, 5] = 1.0
        p_rows[0] = 0.0
        p_rows[0, 1] = 1.0  # root: token 1 = n0 certain
        p_rows[1] = 0.0
        p_rows[1, 2] = 1.0  # n0: token 2 = n3 certain
        gen = torch.Generator().manual_seed(0)
        for _ in range(50):
            assert residual_accept(TOKENS, KIDS, p_rows, gen) == ([0, 3], 5)


class TestMinTokensBan:
    def test_stop_ids_masked_only_above_the_ban_depth(self):
        """EOS gets -inf at the root and depth-1 rows when two more tokens are required, not at depth 2."""
        import torch
        from common.tree import TokenTree
        from services.verifier.runner import ban_until_min_tokens
        tree = TokenTree.build([5, 6], [-1, 0])  # depths 1, 2
        scores = torch.zeros(3, 10)
        out = ban_until_min_tokens(scores, tree, [9], ban_depth=2)
        assert out[0, 9] == float("-inf") and out[1, 9] == float("-inf")
        assert out[2, 9] == 0.0 and out[:, :9].eq(0).all()
