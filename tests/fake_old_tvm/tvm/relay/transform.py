def InferType():
    def run(mod):
        mod.typed = True
        return mod

    return run
