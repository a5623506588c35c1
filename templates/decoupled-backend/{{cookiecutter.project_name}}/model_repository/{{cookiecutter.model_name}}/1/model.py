"""{{ cookiecutter.model_name }}: a decoupled Python model with the interface of Triton's "repeat" example.

For each request it streams one response per element of IN (OUT = IN[i], IDX = i), waiting DELAY[i]
milliseconds before each, then closes the stream with TRITONSERVER_RESPONSE_COMPLETE_FINAL. Its worker keeps
the request for at least WAIT milliseconds.

Threading: execute() only checks each request and hands it to a worker thread of its own, so the
instance takes the next request while earlier ones are still streaming. finalize() stops and joins
the workers.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.logger = pb_utils.Logger
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                f"model_transaction_policy.decoupled must be true for model '{args['model_name']}'"
            )
        self._stopping = threading.Event()
        self._workers_lock = threading.Lock()
        self._workers = set()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                values, delays_ms, wait_ms = self._read_request(request)
            except ValueError as err:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))), flags=FINAL)
                continue
            worker = threading.Thread(
                target=self._stream, args=(request, sender, values, delays_ms, wait_ms), daemon=True
            )
            with self._workers_lock:
                self._workers.add(worker)
            worker.start()
        # A decoupled model returns None: the responses go through the senders.
        return None

    def finalize(self):
        self._stopping.set()
        with self._workers_lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join()

    @staticmethod
    def _read_request(request):
        """IN, DELAY and WAIT of one request; Triton has already checked their data types and shapes."""
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
        delays_ms = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().reshape(-1)
        wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy().reshape(-1)
        if delays_ms.size != values.size:
            raise ValueError(
                f"input 'DELAY' must have one element per element of 'IN' ({values.size}), got {delays_ms.size}"
            )
        if wait.size != 1:
            raise ValueError(f"input 'WAIT' must have exactly one element, got {wait.size}")
        return values, delays_ms, int(wait[0])

    def _sleep_until(self, deadline):
        """Sleep until the monotonic time ``deadline``; False when the model is shutting down."""
        return not self._stopping.wait(max(0.0, deadline - time.monotonic()))

    def _stream(self, request, sender, values, delays_ms, wait_ms):
        """Runs on a worker thread: the whole response stream of one request, always ending with FINAL."""
        error = None
        start = time.monotonic()
        release_at = start + wait_ms / 1000.0
        send_at = start
        try:
            for i, value in enumerate(values):
                send_at += int(delays_ms[i]) / 1000.0
                if not self._sleep_until(send_at):
                    error = pb_utils.TritonError("the model is shutting down", pb_utils.TritonError.UNAVAILABLE)
                    break
                if sender.is_cancelled():
                    self.logger.log_verbose(f"stream cancelled by the client after {i} of {len(values)} responses")
                    error = pb_utils.TritonError("request cancelled by the client", pb_utils.TritonError.CANCELLED)
                    break
                # Your streaming logic goes here: produce the i-th result (a token, a chunk, a partial
                # result...) and send it. This example repeats IN[i].
                outputs = [
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        except Exception as err:  # noqa: BLE001 - any failure must still close the stream
            self.logger.log_error(f"{request.request_id()}: stream failed: {err}")
            error = pb_utils.TritonError(f"stream failed: {err}")
        finally:
            try:
                if error is None:
                    sender.send(flags=FINAL)
                else:
                    sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
            except Exception as err:  # noqa: BLE001 - nothing more can be sent to this client
                self.logger.log_error(f"{request.request_id()}: cannot close the stream: {err}")
            if error is None:
                self._sleep_until(release_at)  # keep the request until WAIT has passed
            with self._workers_lock:
                self._workers.discard(threading.current_thread())
