"""THE table of disagreements known today: (model, path) -> failure class from issue 10.

Each entry makes that zoo case ``xfail(strict=True)``: the suite stays green while the fix is
pending, and the case fails as XPASS the moment it starts agreeing, so the entry is dropped
then. Nothing else in the zoo excuses a disagreement.

The text before the first ":" must be one of :data:`FAILURE_CLASSES`; the rest is the symptom
(the verdict fxflow gives against the real gradient, and the ``cut_by`` op it names).
"""
from __future__ import annotations

import pytest

VIEW_WRITES = "1. in-place writes through views are lost"
TWINS = "2. verdicts depend on the twins"
MULTI_OUTPUT = "3. multi-output leaf modules"
FAILURE_CLASSES = (VIEW_WRITES, TWINS, MULTI_OUTPUT)

_RUNTIME_BOTH_TWINS = ("runtime", "runtime/real twins")
_SPEC_AUGMENT = (f"{VIEW_WRITES}: SpecAugment's masked write `hidden_states[mask_time_indices] = "
                 "self.masked_spec_embed` (train mode) cuts the feature encoder, 'cut by setitem'")

KNOWN_DISAGREEMENTS: dict[tuple[str, str], str] = {
    # Longformer attention builds its output in new_zeros/full_like buffers written through slices
    **{(name, path): f"{VIEW_WRITES}: query/key/value called cut by new_zeros, full_like, setitem, add_"
       for name in ("longformer", "led") for path in _RUNTIME_BOTH_TWINS},
    # SpecAugment in every wav2vec2-style speech encoder
    **{(name, path): _SPEC_AUGMENT for name in ("wav2vec2", "hubert", "unispeech", "sew", "data2vec_audio")
       for path in _RUNTIME_BOTH_TWINS},
    **{("wavlm", path): _SPEC_AUGMENT for path in _RUNTIME_BOTH_TWINS},
    ("wavlm", "torch.export"): f"{VIEW_WRITES}: SpecAugment's masked write, exported as index_put_, "
                               "'cut by index_put_'",
    # nn.Dropout(inplace=True) after every conv block: the whole network reads cut
    **{(name, path): f"{VIEW_WRITES}: dropout_ (in place, train mode) called the cut of every conv before it"
       for name in ("mobilenet_v1", "mobilenet_v2") for path in ("torch.export", *_RUNTIME_BOTH_TWINS)},
    # Funnel's relative attention scales a slice in place
    **{("funnel", path): f"{VIEW_WRITES}: r_kernel/r_r_bias called cut by mul_"
       for path in ("torch.export", *_RUNTIME_BOTH_TWINS)},
    ("rwkv", "torch.export"): f"{VIEW_WRITES}: time_mix_*/time_decay/time_first called unused or cut by "
                              "zeros_like (the WKV state written in place)",
    # LongT5's local attention: `scores += position_bias` on the einsum result (a view)
    **{("longt5", path): f"{VIEW_WRITES}: LocalSelfAttention q/k called cut by add_ (`scores += position_bias`)"
       for path in _RUNTIME_BOTH_TWINS},
    # GroupViT: straight-through hard assignment `zeros_like(..).scatter_(..)` and `tokens += ...`
    **{("groupvit", path): f"{VIEW_WRITES}: assign q_proj/k_proj called cut by zeros_like, detach, add_ "
                           "(hard_softmax's straight-through estimator and `new_image_tokens += ...`)"
       for path in _RUNTIME_BOTH_TWINS},
    # only the attention weights of nn.MultiheadAttention are used: out_proj gets no gradient
    **{("nn_mha_weights_only", path): f"{MULTI_OUTPUT}: attention.out_proj called reachable, real grad None"
       for path in ("symbolic_trace", *_RUNTIME_BOTH_TWINS)},
}


def marks(name: str, path: str) -> list[pytest.MarkDecorator]:
    """The strict xfail of a known (model, path) disagreement, else nothing."""
    reason = KNOWN_DISAGREEMENTS.get((name, path))
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
