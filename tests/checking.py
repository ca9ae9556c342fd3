"""What the check tests share: a failed check, and the phrases its message must say."""

from bayesattn_lite import checks


def failed(result, *phrases):
    """Assert the result failed, displays as such, and its message says every phrase."""
    assert isinstance(result, checks.CheckResult)
    assert not result and result.passed is False
    assert "❌" in result._repr_markdown_() and "❌" in repr(result)
    assert "Traceback" not in result.message
    for phrase in phrases:
        assert phrase in result.message, (phrase, result.message)
    return result
