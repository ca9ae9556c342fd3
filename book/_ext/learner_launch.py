"""One Colab route: a chapter's launch buttons (the rocket: Colab, Binder) open its learner copy.

sphinx-book-theme builds the launch buttons from the page's own path, so on a chapter they would open
``book/NN_name.ipynb``, the full chapter with the exercises' solutions, while the chapter's "Before you
start" box opens ``learner/NN_name.ipynb`` (``bayesattn_lite.instructor.learner_copies``). This extension
runs after the theme's ``add_launch_buttons`` and points every launch button of a page that has a
learner copy at that copy, so a learner meets one notebook, whichever button they press. The full
chapter stays in the repository under ``book/``; a page that means it says so.
"""

from pathlib import Path

LAUNCH_GROUP = "launch-buttons"  # the label sphinx-book-theme gives its group of launch buttons


def learner_copy(srcdir, pagename):
    """The learner copy's path relative to the repository (``learner/NN_name.ipynb``) of a chapter page
    ``book/NN_name``, or None for a page without one."""
    folder, _, name = pagename.rpartition("/")
    path = Path(srcdir) / "learner" / f"{name}.ipynb"
    return f"learner/{name}.ipynb" if folder == "book" and path.exists() else None


def point_at_learner_copy(app, pagename, templatename, context, doctree):
    copy = learner_copy(app.srcdir, pagename)
    if copy is None:
        return
    for group in context.get("header_buttons", []):
        if group.get("label") != LAUNCH_GROUP:
            continue
        for button in group.get("buttons", []):
            if "url" in button:
                button["url"] = button["url"].replace(f"{pagename}.ipynb", copy)
                button["tooltip"] = f"{button.get('tooltip', 'Launch')}: the exercises, without their solutions"


def setup(app):
    app.connect("html-page-context", point_at_learner_copy, priority=600)  # after the theme's (501)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
