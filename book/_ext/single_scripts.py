"""Each script once per page.

sphinx-thebe's configuration (an inline ``const THEBE_JS_URL = ...``) reaches every page twice, once
through Jupyter Book and once through sphinx-book-theme, and the second copy stops with "Identifier
'THEBE_JS_URL' has already been declared" in every reader's console. This keeps the first of any
scripts that are the same file with the same inline body (also sphinx-togglebutton's repeated
selector line).
"""


def drop_repeated_scripts(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for script in context.get("script_files", []):
        # an inline script's file name is None from one extension and "" from another: the same script
        key = (getattr(script, "filename", script) or "", getattr(script, "attributes", {}).get("body"))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", drop_repeated_scripts, priority=900)  # after every extension added its own
    return {"parallel_read_safe": True, "parallel_write_safe": True}
