"""``check_offer_sdp`` on a real aiortc offer, its named mutilations, and random line loss/truncation."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.reliability.helpers import mutilations, sdp_lines
from transports.sdp_check import SDPError, check_offer_sdp


def test_the_real_offer_passes_and_each_mutilation_is_named(offer_sdp):
    check_offer_sdp(offer_sdp)
    for name, sdp in mutilations(offer_sdp).items():
        with pytest.raises(SDPError):
            check_offer_sdp(sdp)
            pytest.fail(f"{name} was accepted")


@given(st.data())
def test_any_prefix_or_line_loss_never_crashes_the_check(offer_sdp, data):
    lines = sdp_lines(offer_sdp)
    keep = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    text = "\r\n".join(line for line, k in zip(lines, keep, strict=True) if k)
    cut = data.draw(st.integers(0, len(text)))
    with contextlib.suppress(SDPError):
        check_offer_sdp(text[:cut])


