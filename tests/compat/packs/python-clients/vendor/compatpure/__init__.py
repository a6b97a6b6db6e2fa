"""A vendored pure-Python module: found through PYTHONPATH=/workdir/vendor in the pack."""


def shout(text):
    return text.upper() + "!"
