"""Decoupled-protocol faults planted into generated python models by tbgen's tests
(tests/smoke/test_decoupled_protocol.py), beside each model's model.py: each model breaks the protocol one
way, chosen by its name; a model whose name names no fault streams as generated."""

import numpy as np

FAULTS = ("after_final", "final_twice", "error_mid", "never_final")


def fault_of(model_name):
    return next((fault for fault in FAULTS if fault in model_name), None)


def after_response(sender, pb_utils, model_name, index):
    """After data response ``index``: an error_mid model sends an error response that does not end the
    stream (no final flag), before the data responses that follow."""
    if fault_of(model_name) == "error_mid" and index == 0:
        sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("planted: an error in mid-stream")))


def send_final(sender, pb_utils, model_name, final):
    """The final flag as the model's fault sends it: never, twice, or followed by a data response."""
    fault = fault_of(model_name)
    if fault == "never_final":
        return
    sender.send(flags=final)
    if fault == "final_twice":
        sender.send(flags=final)
    if fault == "after_final":
        tensors = [
            pb_utils.Tensor("OUT", np.zeros(1, np.int32)),
            pb_utils.Tensor("IDX", np.zeros(1, np.uint32)),
        ]
        sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
