"""What of a stream window's left context is identical from one window to the next (issue 18, item 2).

Consecutive windows of an utterance shorter than the left context start at the same sample and differ
only by the new chunks at the end. The raw log-mel (STFT, mel, log) of every frame clear of the old
window's edge is then identical; Parakeet's per-feature normalization (mean and std per mel bin over
the whole window) changes with every chunk, so the normalized features and everything after them
(the conv subsampling, the conformer) differ everywhere. Only a checkpoint without that
normalization could reuse the subsampling output of the left context. bench/left_context_reuse.py
measures what the identical part is worth.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.features import FeatureConfig, LogMelFeatures
from asr.parakeet.streaming import StreamConfig
from asr.parakeet.tiny import synthetic_speech, tiny_model

CHUNK = StreamConfig().chunk_frames * StreamConfig().samples_per_frame  # 160 ms
EDGE_FEATURES = 3  # feature frames whose centred STFT window reaches past the old window's end
EDGE_ENCODER = 2  # encoder frames whose subsampling receptive field does


def windows(seconds: float = 4.0) -> tuple[torch.Tensor, torch.Tensor]:
    clip = torch.from_numpy(synthetic_speech(seconds + 1.0, seed=1))
    n = int(seconds * 16000) // 1280 * 1280  # windows end on encoder frames, as the sessions' do
    return clip[:n][None], clip[: n + CHUNK][None]


@pytest.fixture(scope="module")
def fast() -> FastConformer:
    model = tiny_model(0, blank_bias=0.0)  # the joint is not used: no emission calibration
    return FastConformer(model.encoder, model.encoder_projector, dtype=torch.float32)


def test_checkpoint_features_are_normalized_per_feature() -> None:
    assert FeatureConfig().normalize == "per_feature"  # NeMo's Parakeet preprocessors (v2, v3) too


@pytest.mark.parametrize("normalize", ["per_feature", "none"])
def test_what_consecutive_windows_share(normalize: str, fast: FastConformer) -> None:
    old, new = windows()
    raw = LogMelFeatures(dataclasses.replace(FeatureConfig(), normalize="none"))
    feats = LogMelFeatures(dataclasses.replace(FeatureConfig(), normalize=normalize))
    raw_old, n_old = raw(old)
    raw_new, _ = raw(new)
    keep = int(n_old) - EDGE_FEATURES
    assert torch.equal(raw_old[0, :keep], raw_new[0, :keep])  # the raw log-mel of the left context: always

    f_old, n_old = feats(old)
    f_new, n_new = feats(new)
    sub_old = fast._subsample(f_old, n_old)
    sub_new = fast._subsample(f_new, n_new)
    enc_keep = sub_old.shape[1] - EDGE_ENCODER
    assert sub_new.shape[1] == sub_old.shape[1] + 2
    if normalize == "none":  # subsampling reusable: identical bits for all but the edge frames
        assert torch.equal(f_old[0, :keep], f_new[0, :keep])
        assert torch.equal(sub_old[0, :enc_keep], sub_new[0, :enc_keep])
    else:  # Parakeet: the new chunk moves every bin's mean and std, so nothing after the log-mel repeats
        assert (f_old[0, :keep] - f_new[0, :keep]).abs().amin(dim=0).max() > 0
        assert (f_old[0, :keep] - f_new[0, :keep]).abs().max() > 1e-3
        differs = (sub_old[0, :enc_keep] - sub_new[0, :enc_keep]).abs().amax(dim=1) > 1e-5
        assert differs.float().mean() > 0.9  # nearly every left-context frame changed
