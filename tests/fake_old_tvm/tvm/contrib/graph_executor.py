import numpy as np

import tvm


class GraphModule(object):
    def __init__(self, factory_result):
        self._program = factory_result
        self._inputs = {}
        self._outputs = []

    def set_input(self, name, value):
        assert isinstance(value, tvm.NDArray), "set_input takes an NDArray"
        self._inputs[name] = value.numpy()

    def run(self):
        self._outputs = self._program.evaluate(self._inputs)

    def get_num_outputs(self):
        return len(self._outputs)

    def get_output(self, index):
        return tvm.nd.array(np.asarray(self._outputs[index]))
