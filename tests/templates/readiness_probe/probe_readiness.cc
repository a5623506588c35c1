// Test-only, linked into a rendered C++ backend by probe_readiness.cmake: after each execution, another
// thread asks the backend's TRITONBACKEND_ModelInstanceReady about the instance, as Triton's core (r25.12
// and later) does on every readiness probe, and logs the answer at INFO level:
//   "probe_readiness: ready"  or  "probe_readiness: not ready (<error code>): <message>"
// The embedded 2.51 server never asks the backend itself: this stands in for a newer core's probe, with
// the same call (the instance's TRITONBACKEND_ModelInstance*) and the same reading of the error.

// This file defines the real entry point; the generated one is renamed for the other sources only.
#undef TRITONBACKEND_ModelInstanceExecute

#include <string>
#include <thread>

#include "triton/backend/backend_common.h"
#include "triton/core/tritonbackend.h"

extern "C" {
TRITONSERVER_Error* ProbedModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count);

TRITONBACKEND_ISPEC TRITONSERVER_Error*
TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count)
{
  TRITONSERVER_Error* err =
      ProbedModelInstanceExecute(instance, requests, request_count);
  std::string verdict;
  std::thread probe([instance, &verdict] {
    TRITONSERVER_Error* not_ready = TRITONBACKEND_ModelInstanceReady(instance);
    if (not_ready == nullptr) {
      verdict = "ready";
      return;
    }
    verdict = std::string("not ready (") +
              TRITONSERVER_ErrorCodeString(not_ready) +
              "): " + TRITONSERVER_ErrorMessage(not_ready);
    TRITONSERVER_ErrorDelete(not_ready);
  });
  probe.join();
  LOG_MESSAGE(
      TRITONSERVER_LOG_INFO, ("probe_readiness: " + verdict).c_str());
  return err;
}

}  // extern "C"
