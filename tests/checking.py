"""What the check tests share: a failed check, and the phrases its message must say."""

from bayesattn_lite import checks


def failed(result, *phrases):
    """Assert the result failed, displays as such, and its message says every phrase."""
    assert isinstance(result, checks.CheckResult)
    assert not result and result.passed is False
    assert "❌" in result._repr_markdown_() and "❌" in repr(result)
    assert "Traceback" not in result.message
    words = result.practice or result.message  # a problem set's check shows less: its full words are kept
    for phrase in phrases:
        assert phrase in words, (phrase, words)
    return result
