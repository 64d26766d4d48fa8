"""Tiny random-weight Parakeet-TDT models for CPU tests of the GPU path."""

from __future__ import annotations

import torch

TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    num_mel_bins=32,
    subsampling_conv_channels=8,
    attention_bias=False,
    convolution_bias=False,
    dropout=0.0,
    dropout_positions=0.0,
    layerdrop=0.0,
    activation_dropout=0.0,
    attention_dropout=0.0,
    scale_input=False,
)


def tiny_tdt(seed: int = 0, **enc_overrides) -> torch.nn.Module:
    """A 2-layer, 64-wide ParakeetForTDT with non-trivial BatchNorm statistics and attention biases."""
    import transformers

    config = transformers.ParakeetTDTConfig(
        encoder_config={**TINY, **enc_overrides}, vocab_size=33, decoder_hidden_size=16, blank_token_id=32
    )
    torch.manual_seed(seed)
    model = transformers.ParakeetForTDT(config).eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics and attention biases
        for layer in model.encoder.layers:
            bn = layer.conv.norm
            bn.running_mean.normal_(0, 0.3)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.normal_(1.0, 0.2)
            bn.bias.normal_(0, 0.2)
            layer.self_attn.bias_u.normal_(0, 0.3)
            layer.self_attn.bias_v.normal_(0, 0.3)
    return model
