class PassContext(object):
    current = None

    def __init__(self, opt_level=2, **_):
        self.opt_level = opt_level

    def __enter__(self):
        PassContext.current = self
        return self

    def __exit__(self, *exc):
        PassContext.current = None
