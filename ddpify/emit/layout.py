"""Where emitted lines are wrapped: at black's default line length, as black would wrap
them, so that the diff of a formatted script stays formatted."""

LINE_LENGTH = 88


def fits(indent: int, text: str) -> bool:
    """Whether `text` fits on one line at this indent."""
    return indent + len(text) <= LINE_LENGTH
