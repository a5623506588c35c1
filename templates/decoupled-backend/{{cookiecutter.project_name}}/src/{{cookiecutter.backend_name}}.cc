{%- import "signature.j2" as sig with context -%}
{%- if sig.add_sub -%}
// {{ cookiecutter.backend_name }}: a decoupled Triton backend.
//
// A decoupled model may send any number of responses per request, at any
// time, and closes each request's stream with a response (or a bare flag)
// carrying TRITONSERVER_RESPONSE_COMPLETE_FINAL. This example has the
// interface of Triton's "repeat" example, so existing repeat clients work
// unchanged:
//
//   IN    INT32  [-1]  the values to stream back, one response each
//   DELAY UINT32 [-1]  milliseconds to wait before each response
//   WAIT  UINT32 [1]   milliseconds after which the request is released
//                      (each at most 10000)
//   OUT   INT32  [1]   IN[i]
//   IDX   UINT32 [1]   i
//
// Threading: TRITONBACKEND_ModelInstanceExecute only creates each request's
// response factory, validates the request, copies its inputs and hands it to
// a worker thread of its own, so the instance takes the next request while
// earlier ones are still streaming. The instance waits for (joins) its workers
// when it is destroyed. Triton keeps a model loaded while a response factory
// of it exists, so streams normally end first; a worker still sleeping is
// woken and ends its stream with an UNAVAILABLE error.
//
// Ownership: when a response factory cannot be created, execute returns the
// error and Triton answers and releases every request of the call. Otherwise
// requests, response factories, responses and errors are held by RAII owners
// below, so no early return leaks one, every request gets exactly one final
// flag, and every error is sent to the request it concerns.

{%- elif sig.accumulator -%}
// {{ cookiecutter.backend_name }}: a decoupled Triton backend for a stateful model.
//
// A decoupled model may send any number of responses per request, at any
// time, and closes each request's stream with a response (or a bare flag)
// carrying TRITONSERVER_RESPONSE_COMPLETE_FINAL. This one runs under Triton's
// sequence batcher ({{ sig.sequence }} strategy): each request belongs to a sequence,
// and its one response, flagged final, holds in every output the running sum
// of {{ sig.inputs[0].name }} over the requests of its sequence so far.
{%- include "header_comment.cc.j2" %}
{%- if cookiecutter.request_parameters %}
// Each response carries the request's parameter "tag" back (see ReadRequestParameters).
{%- endif %}
//
// Put your own computation in Step() below. The rest is the plumbing every
// sequence backend needs: config validation, the control inputs, the state of
// each sequence, errors and statistics.
//
// Errors: when a response factory cannot be created, execute returns the
// error and Triton answers and releases every request of the call. Otherwise
// each request's error travels in its final response, and every request is
// released.
{%- else -%}
// {{ cookiecutter.backend_name }}: a decoupled Triton backend.
//
// A decoupled model may send any number of responses per request, at any
// time, and closes each request's stream with a response (or a bare flag)
// carrying TRITONSERVER_RESPONSE_COMPLETE_FINAL. The model's tensors:
{%- include "header_comment.cc.j2" %}
// This backend sends each request one response, computed by Compute() below
// (a placeholder that fits the tensors) and flagged final, from the request's
// response factory. To stream, send more responses from the factory before
// the final one; a factory outlives its request, so a thread of your own may
// go on streaming after execute has returned (the template's example without
// a signature, Triton's "repeat" interface, streams that way).
//
// Errors: when a response factory cannot be created, execute returns the
// error and Triton answers and releases every request of the call. Otherwise
// each request's error travels in its final response, and every request is
// released.
{%- endif %}

#include <algorithm>
{%- if sig.add_sub and cookiecutter.custom_metrics %}
#include <atomic>
{%- endif %}
{%- if not sig.add_sub %}
#include <charconv>
{%- endif %}
{%- if sig.add_sub %}
#include <chrono>
#include <condition_variable>
{%- endif %}
#include <cstdint>
#include <cstring>
{%- if sig.add_sub %}
#include <future>
#include <list>
{%- endif %}
#include <memory>
{%- if sig.add_sub %}
#include <mutex>
{%- endif %}
#include <optional>
#include <string>
{%- if sig.add_sub %}
#include <system_error>
{%- else %}
#include <string_view>
#include <type_traits>
{%- endif %}
{%- if sig.accumulator and not cookiecutter.implicit_state %}
#include <unordered_map>
{%- endif %}
#include <utility>
#include <vector>

#include "triton/backend/backend_common.h"
{%- if not sig.add_sub %}
#include "triton/backend/backend_input_collector.h"
#include "triton/backend/backend_memory.h"
{%- endif %}
#include "triton/backend/backend_model.h"
#include "triton/backend/backend_model_instance.h"
{%- if not sig.add_sub %}
#include "triton/backend/backend_output_responder.h"
{%- endif %}
#include "triton/core/tritonbackend.h"

namespace triton { namespace backend { namespace {{ cookiecutter.backend_name }} {
{%- if sig.add_sub %}

using Clock = std::chrono::steady_clock;

//
// RAII owners of Triton objects.
//

struct ErrorDeleter {
  void operator()(TRITONSERVER_Error* error) const
  {
    TRITONSERVER_ErrorDelete(error);
  }
};
using ErrorPtr = std::unique_ptr<TRITONSERVER_Error, ErrorDeleter>;

// Releasing the request frees its input tensors; responses still flow through
// the request's response factory afterwards.
struct RequestReleaser {
  void operator()(TRITONBACKEND_Request* request) const
  {
    LOG_IF_ERROR(
        TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL),
        "failed releasing request");
  }
};
using RequestPtr = std::unique_ptr<TRITONBACKEND_Request, RequestReleaser>;

struct ResponseDeleter {
  void operator()(TRITONBACKEND_Response* response) const
  {
    LOG_IF_ERROR(
        TRITONBACKEND_ResponseDelete(response), "failed deleting response");
  }
};
using ResponsePtr = std::unique_ptr<TRITONBACKEND_Response, ResponseDeleter>;

// ResponseFactoryDeleter comes from backend_common.h.
using ResponseFactoryPtr =
    std::unique_ptr<TRITONBACKEND_ResponseFactory, ResponseFactoryDeleter>;

// Create output 'name' of shape [1] in 'response' and copy one value into it.
TRITONSERVER_Error*
SetScalarOutput(
    TRITONBACKEND_Response* response, const char* name,
    TRITONSERVER_DataType datatype, const void* value, size_t byte_size)
{
  const int64_t shape[1] = {1};
  TRITONBACKEND_Output* output = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(
      response, &output, name, datatype, shape, 1 /* dims_count */));

  void* buffer = nullptr;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(
      output, &buffer, byte_size, &memory_type, &memory_type_id));
  RETURN_ERROR_IF_TRUE(
      memory_type == TRITONSERVER_MEMORY_GPU, TRITONSERVER_ERROR_UNSUPPORTED,
      std::string("output '") + name +
          "': this backend writes CPU memory only, but the client asked for "
          "GPU memory");
  std::memcpy(buffer, value, byte_size);
  return nullptr;  // success
}
{%- if cookiecutter.request_parameters %}

{% include "request_parameters.cc.j2" %}
{%- endif %}

//
// ResponseStream
//
// Owns a request's response factory and guarantees that the stream is closed:
// exactly one TRITONSERVER_RESPONSE_COMPLETE_FINAL is sent, also when an error
// path leaves early. Used by one thread at a time.
//
class ResponseStream {
 public:
  explicit ResponseStream(TRITONBACKEND_ResponseFactory* factory)
      : factory_(factory)
  {
  }

  ~ResponseStream()
  {
    if (!closed_) {
      Close(TRITONSERVER_ErrorNew(
          TRITONSERVER_ERROR_INTERNAL,
          "the backend ended the stream without a final response"));
    }
  }

  ResponseStream(const ResponseStream&) = delete;
  ResponseStream& operator=(const ResponseStream&) = delete;

  // True once the client has cancelled the request (the request itself may
  // already be released; the factory still knows).
  bool IsCancelled()
  {
    bool cancelled = false;
    LOG_IF_ERROR(
        TRITONBACKEND_ResponseFactoryIsCancelled(factory_.get(), &cancelled),
        "failed querying cancellation");
    return cancelled;
  }

{%- if cookiecutter.request_parameters %}

  // Send one (non-final) response holding OUT = 'out' and IDX = 'idx', and
  // the response parameter "tag".
  TRITONSERVER_Error* Send(
      int32_t out, uint32_t idx, const RequestParameters& parameters)
{%- else %}

  // Send one (non-final) response holding OUT = 'out' and IDX = 'idx'.
  TRITONSERVER_Error* Send(int32_t out, uint32_t idx)
{%- endif %}
  {
    TRITONBACKEND_Response* raw = nullptr;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNewFromFactory(&raw, factory_.get()));
    ResponsePtr response(raw);  // deleted if an output fails below
    RETURN_IF_ERROR(SetScalarOutput(
        response.get(), "OUT", TRITONSERVER_TYPE_INT32, &out, sizeof(out)));
    RETURN_IF_ERROR(SetScalarOutput(
        response.get(), "IDX", TRITONSERVER_TYPE_UINT32, &idx, sizeof(idx)));
{%- if cookiecutter.request_parameters %}
    RETURN_IF_ERROR(SetResponseParameters(parameters, response.get()));
{%- endif %}
    // Triton owns the response from here on, even if sending fails.
    return TRITONBACKEND_ResponseSend(
        response.release(), 0 /* send_flags */, nullptr /* success */);
  }

  // Close the stream: a bare final flag on success, or an error response
  // flagged final. Takes ownership of 'error'.
  void Close(TRITONSERVER_Error* error)
  {
    ErrorPtr owned(error);
    closed_ = true;
    if (owned != nullptr) {
      TRITONBACKEND_Response* response = nullptr;
      TRITONSERVER_Error* err =
          TRITONBACKEND_ResponseNewFromFactory(&response, factory_.get());
      if (err == nullptr) {
        LOG_IF_ERROR(
            TRITONBACKEND_ResponseSend(
                response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, owned.get()),
            "failed sending error response");
        return;
      }
      // No response to carry the error: log it and still end the stream.
      LOG_IF_ERROR(err, "failed creating error response");
      LOG_MESSAGE(
          TRITONSERVER_LOG_ERROR, TRITONSERVER_ErrorMessage(owned.get()));
    }
    LOG_IF_ERROR(
        TRITONBACKEND_ResponseFactorySendFlags(
            factory_.get(), TRITONSERVER_RESPONSE_COMPLETE_FINAL),
        "failed sending final flag");
  }

 private:
  ResponseFactoryPtr factory_;
  bool closed_ = false;
};

TRITONSERVER_Error*
ShuttingDownError()
{
  return TRITONSERVER_ErrorNew(
      TRITONSERVER_ERROR_UNAVAILABLE, "the model instance is shutting down");
}

// Everything a worker needs to stream one request, copied out of the request
// so that it can be released before the stream ends.
struct StreamJob {
  RequestPtr request;
  std::unique_ptr<ResponseStream> stream;
  std::vector<int32_t> in;
  std::vector<uint32_t> delay_ms;
  uint32_t wait_ms = 0;
{%- if cookiecutter.request_parameters %}
  RequestParameters parameters;  // answered back in every response
{%- endif %}
  uint64_t exec_start_ns = 0;
  uint64_t compute_start_ns = 0;
{%- if cookiecutter.custom_metrics %}
  // The execution the request came in, shared by its requests' jobs.
  std::shared_ptr<struct ExecutionTally> execution;
{%- endif %}
};

// Copy the whole input tensor 'name' (in CPU memory) into 'values'.
template <typename T>
TRITONSERVER_Error*
ReadInputValues(
    TRITONBACKEND_Request* request, const char* name, std::vector<T>* values)
{
  TRITONBACKEND_Input* input = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, name, &input));
  uint64_t byte_size = 0;
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(
      input, nullptr /* name */, nullptr /* datatype */, nullptr /* shape */,
      nullptr /* dims_count */, &byte_size, nullptr /* buffer_count */));
  values->resize(byte_size / sizeof(T));
  size_t read_size = values->size() * sizeof(T);
  return ReadInputTensor(
      request, name, reinterpret_cast<char*>(values->data()), &read_size);
}

// The longest DELAY (per element) and WAIT a request may ask for.
constexpr uint32_t kMaxDelayMs = 10000;

// Read and check IN, DELAY and WAIT of one request. Triton has already checked
// data types and shapes against the model configuration.
TRITONSERVER_Error*
ReadRequest(TRITONBACKEND_Request* request, StreamJob* job)
{
  RETURN_IF_ERROR(ReadInputValues(request, "IN", &job->in));
  RETURN_IF_ERROR(ReadInputValues(request, "DELAY", &job->delay_ms));
  std::vector<uint32_t> wait;
  RETURN_IF_ERROR(ReadInputValues(request, "WAIT", &wait));

  RETURN_ERROR_IF_FALSE(
      job->delay_ms.size() == job->in.size(), TRITONSERVER_ERROR_INVALID_ARG,
      std::string("input 'DELAY' must have one element per element of 'IN' (") +
          std::to_string(job->in.size()) + "), got " +
          std::to_string(job->delay_ms.size()));
  RETURN_ERROR_IF_FALSE(
      wait.size() == 1, TRITONSERVER_ERROR_INVALID_ARG,
      std::string("input 'WAIT' must have exactly one element, got ") +
          std::to_string(wait.size()));
  // A client chooses how long the model sleeps: bounded, so that no request
  // can hold a stream (or a model that waits for one) for hours.
  const auto longest =
      std::max_element(job->delay_ms.begin(), job->delay_ms.end());
  RETURN_ERROR_IF_TRUE(
      longest != job->delay_ms.end() && *longest > kMaxDelayMs,
      TRITONSERVER_ERROR_INVALID_ARG,
      std::string("input 'DELAY' must be at most ") +
          std::to_string(kMaxDelayMs) + " ms per element, got " +
          std::to_string(*longest));
  RETURN_ERROR_IF_TRUE(
      wait[0] > kMaxDelayMs, TRITONSERVER_ERROR_INVALID_ARG,
      std::string("input 'WAIT' must be at most ") +
          std::to_string(kMaxDelayMs) + " ms, got " + std::to_string(wait[0]));
  job->wait_ms = wait[0];
  return nullptr;  // success
}

{% include "backend_helpers.cc.j2" %}
{%- if cookiecutter.custom_metrics %}

// The requests of one execution still streaming, and those that succeeded.
// Triton counts an execution when execute returns (execution_count) and a
// request when it is released with success (inference_count): the
// execution_batch_size histogram observes an execution's successful requests
// once its last request is released, so that it matches both.
struct ExecutionTally {
  explicit ExecutionTally(uint32_t requests) : pending(requests) {}
  std::atomic<uint32_t> pending;
  std::atomic<uint64_t> succeeded{0};
};
{% endif %}
// The configuration must have the decoupled "repeat" interface.
TRITONSERVER_Error*
ModelState::ValidateModelConfig()
{
  common::TritonJson::Value& config = ModelConfig();

  // Responses go through a response factory, so the model must be decoupled.
  bool decoupled = false;
  common::TritonJson::Value policy;
  if (config.Find("model_transaction_policy", &policy)) {
    common::TritonJson::Value value;
    if (policy.Find("decoupled", &value)) {
      RETURN_IF_ERROR(value.AsBool(&decoupled));
    }
  }
  RETURN_ERROR_IF_FALSE(
      decoupled, TRITONSERVER_ERROR_INVALID_ARG,
      ModelPrefix(Name()) + "model_transaction_policy.decoupled must be true");
  RETURN_ERROR_IF_FALSE(
      MaxBatchSize() == 0, TRITONSERVER_ERROR_INVALID_ARG,
      ModelPrefix(Name()) + "max_batch_size must be 0, got " +
          std::to_string(MaxBatchSize()));

  // Change these tables together with config.pbtxt when your tensors change.
  // {name, data type, config.pbtxt's data_type, dims, reshape, optional}
  const std::vector<TensorSpec> inputs = {
      {"IN", TRITONSERVER_TYPE_INT32, "TYPE_INT32", {-1}, std::nullopt, false},
      {"DELAY",
       TRITONSERVER_TYPE_UINT32,
       "TYPE_UINT32",
       {-1},
       std::nullopt,
       false},
      {"WAIT",
       TRITONSERVER_TYPE_UINT32,
       "TYPE_UINT32",
       {1},
       std::nullopt,
       false}};
  const std::vector<TensorSpec> outputs = {
      {"OUT", TRITONSERVER_TYPE_INT32, "TYPE_INT32", {1}, std::nullopt, false},
      {"IDX",
       TRITONSERVER_TYPE_UINT32,
       "TYPE_UINT32",
       {1},
       std::nullopt,
       false}};
  return ValidateTensors(this, inputs, outputs);
}

//
// ModelInstanceState
//
// State associated with a model instance. An object of this class is created
// and associated with each TRITONBACKEND_ModelInstance.
//
class ModelInstanceState : public BackendModelInstance {
 public:
  using BackendModelInstance::BackendModelInstance;
  // Stops the workers (their sleeps end at once) and joins them.
  virtual ~ModelInstanceState();

  // Take ownership of each request and start streaming its responses (see
  // TRITONBACKEND_ModelInstanceExecute for the error contract).
  TRITONSERVER_Error* ProcessRequests(
      TRITONBACKEND_Request** requests, const uint32_t request_count);

 private:
  // Runs on a worker thread: the whole response stream of one request. Takes
  // the job so that its response factory, which keeps the model loaded, is
  // deleted as soon as the stream ends.
  void Stream(std::shared_ptr<StreamJob> job);

  // Sleep until 'deadline'; false when the instance is shutting down.
  bool SleepUntil(Clock::time_point deadline);

  // Report a request's statistics to Triton (when built with stats).
  void ReportRequestStatistics(
      TRITONBACKEND_Request* request, bool success, uint64_t exec_start_ns,
      uint64_t compute_start_ns);

  // Report the request's statistics and release it.
  void ReleaseRequest(StreamJob& job, bool success);

  // Join the workers that have finished their stream.
  void ReapFinishedWorkers();

  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by mu_
  // Used only by the thread that runs TRITONBACKEND_ModelInstanceExecute
  // (Triton never runs it concurrently for one instance) and the destructor.
  std::list<std::future<void>> workers_;
};

ModelInstanceState::~ModelInstanceState()
{
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  for (auto& worker : workers_) {
    worker.wait();
  }
}

bool
ModelInstanceState::SleepUntil(Clock::time_point deadline)
{
  std::unique_lock<std::mutex> lock(mu_);
  return !stop_cv_.wait_until(lock, deadline, [this] { return stopping_; });
}

void
ModelInstanceState::ReapFinishedWorkers()
{
  workers_.remove_if([](const std::future<void>& worker) {
    return worker.wait_for(std::chrono::seconds(0)) ==
           std::future_status::ready;
  });
}

TRITONSERVER_Error*
ModelInstanceState::ProcessRequests(
    TRITONBACKEND_Request** requests, const uint32_t request_count)
{
  uint64_t exec_start_ns = 0;
  SET_TIMESTAMP(exec_start_ns);

  // One response factory per request, or none at all and the error, which
  // hands every request back to Triton (see
  // TRITONBACKEND_ModelInstanceExecute).
  std::vector<TRITONBACKEND_ResponseFactory*> factories;
  RETURN_IF_ERROR(NewPerRequest(
      requests, request_count, TRITONBACKEND_ResponseFactoryNew,
      TRITONBACKEND_ResponseFactoryDelete, &factories));
  // From here on the requests are ours: each stream ends with a final flag
  // (an error travels in its final response), and each request is released.
  ReapFinishedWorkers();
{%- if cookiecutter.custom_metrics %}
  const auto execution = std::make_shared<ExecutionTally>(request_count);
{%- endif %}
  for (uint32_t r = 0; r < request_count; ++r) {
    auto job = std::make_shared<StreamJob>();
    job->request.reset(requests[r]);
    job->stream.reset(new ResponseStream(factories[r]));
    job->exec_start_ns = exec_start_ns;
    job->compute_start_ns = exec_start_ns;
{%- if cookiecutter.custom_metrics %}
    job->execution = execution;
{%- endif %}

    TRITONSERVER_Error* err = ReadRequest(job->request.get(), job.get());
{%- if cookiecutter.request_parameters %}
    if (err == nullptr) {
      err = ReadRequestParameters(
          Model()->Name(), job->request.get(), &job->parameters);
    }
{%- endif %}
    if (err != nullptr) {
      job->stream->Close(err);
      ReleaseRequest(*job, false /* success */);
      continue;
    }
    try {
      workers_.push_back(std::async(std::launch::async, [this, job]() mutable {
        Stream(std::move(job));
      }));
    }
    catch (const std::system_error& ex) {
      // No thread for this request: end its stream with the reason.
      job->stream->Close(TRITONSERVER_ErrorNew(
          TRITONSERVER_ERROR_UNAVAILABLE,
          (std::string("cannot start a worker thread: ") + ex.what()).c_str()));
      ReleaseRequest(*job, false /* success */);
    }
  }

#ifdef TRITON_ENABLE_STATS
  // This call only hands the requests over; each request's own statistics are
  // reported when it is released (see ReleaseRequest).
  uint64_t exec_end_ns = 0;
  SET_TIMESTAMP(exec_end_ns);
  LOG_IF_ERROR(
      TRITONBACKEND_ModelInstanceReportBatchStatistics(
          TritonModelInstance(), request_count, exec_start_ns, exec_start_ns,
          exec_end_ns, exec_end_ns),
      "failed reporting batch statistics");
#endif  // TRITON_ENABLE_STATS
  return nullptr;  // success: the requests are the workers' now
}

void
ModelInstanceState::Stream(std::shared_ptr<StreamJob> shared_job)
{
  StreamJob& job = *shared_job;
  SET_TIMESTAMP(job.compute_start_ns);
  const Clock::time_point start = Clock::now();
  const Clock::time_point release_at =
      start + std::chrono::milliseconds(job.wait_ms);
  Clock::time_point send_at = start;

  TRITONSERVER_Error* error = nullptr;
  for (size_t i = 0; i < job.in.size(); ++i) {
    send_at += std::chrono::milliseconds(job.delay_ms[i]);
    // Release the request as soon as its WAIT has passed, between responses.
    if (job.request != nullptr && release_at <= send_at) {
      if (!SleepUntil(release_at)) {
        error = ShuttingDownError();
        break;
      }
      ReleaseRequest(job, true /* success */);
    }
    if (!SleepUntil(send_at)) {
      error = ShuttingDownError();
      break;
    }
    if (job.stream->IsCancelled()) {
      LOG_MESSAGE(
          TRITONSERVER_LOG_VERBOSE,
          ("stream cancelled by the client after " + std::to_string(i) +
           " of " + std::to_string(job.in.size()) + " responses")
              .c_str());
      error = TRITONSERVER_ErrorNew(
          TRITONSERVER_ERROR_CANCELLED, "request cancelled by the client");
      break;
    }

    // Your streaming logic goes here: produce the i-th result (a token, a
    // chunk, a partial result...) and send it. This example repeats IN[i].
{%- if cookiecutter.request_parameters %}
    error = job.stream->Send(job.in[i], static_cast<uint32_t>(i), job.parameters);
{%- else %}
    error = job.stream->Send(job.in[i], static_cast<uint32_t>(i));
{%- endif %}
    if (error != nullptr) {
      break;
    }
  }

  const bool success = (error == nullptr);
  job.stream->Close(error);  // the final flag, with the error if any

  if (job.request != nullptr) {
    if (success) {
      SleepUntil(release_at);
    }
    ReleaseRequest(job, success);
  }
}

void
ModelInstanceState::ReportRequestStatistics(
    [[maybe_unused]] TRITONBACKEND_Request* request,
    [[maybe_unused]] bool success, [[maybe_unused]] uint64_t exec_start_ns,
    [[maybe_unused]] uint64_t compute_start_ns)
{
#ifdef TRITON_ENABLE_STATS
  uint64_t now_ns = 0;
  SET_TIMESTAMP(now_ns);
  LOG_IF_ERROR(
      TRITONBACKEND_ModelInstanceReportStatistics(
          TritonModelInstance(), request, success, exec_start_ns,
          compute_start_ns, now_ns, now_ns),
      "failed reporting request statistics");
#endif  // TRITON_ENABLE_STATS
}

void
ModelInstanceState::ReleaseRequest(StreamJob& job, bool success)
{
  ReportRequestStatistics(
      job.request.get(), success, job.exec_start_ns, job.compute_start_ns);
  job.request.reset();
{%- if cookiecutter.custom_metrics %}

  ModelMetrics& metrics = static_cast<ModelState*>(Model())->Metrics();
  uint64_t now_ns = 0;
  SET_TIMESTAMP(now_ns);
  metrics.AddLatency(now_ns - job.exec_start_ns);
  ExecutionTally& execution = *job.execution;
  if (success) {
    execution.succeeded.fetch_add(1, std::memory_order_relaxed);
  }
  if (execution.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    metrics.ObserveBatchSize(
        execution.succeeded.load(std::memory_order_relaxed));
  }
{%- endif %}
}

{%- else %}

// ResponseFactoryDeleter comes from backend_common.h.
using ResponseFactoryPtr =
    std::unique_ptr<TRITONBACKEND_ResponseFactory, ResponseFactoryDeleter>;

{% include "backend_helpers.cc.j2" %}
{%- if sig.accumulator and cookiecutter.request_parameters %}

{% include "request_parameters.cc.j2" %}
{%- endif %}
{% include "backend_tensors.cc.j2" %}

{% if sig.accumulator -%}
{% include "decoupled_sequence.cc.j2" %}
{%- else -%}
{% include "backend_compute.cc.j2" %}

{% include "backend_executor.cc.j2" %}
{%- endif %}

// The configuration must be decoupled and declare the tensors of the table
{%- if sig.accumulator %}
// and the sequence batcher's control inputs
{%- endif %}.
TRITONSERVER_Error*
ModelState::ValidateModelConfig()
{
  // Responses go through a response factory, so the model must be decoupled.
  bool decoupled = false;
  common::TritonJson::Value policy;
  if (ModelConfig().Find("model_transaction_policy", &policy)) {
    common::TritonJson::Value value;
    if (policy.Find("decoupled", &value)) {
      RETURN_IF_ERROR(value.AsBool(&decoupled));
    }
  }
  RETURN_ERROR_IF_FALSE(
      decoupled, TRITONSERVER_ERROR_INVALID_ARG,
      ModelPrefix(Name()) + "model_transaction_policy.decoupled must be true");
{%- if sig.accumulator %}
  RETURN_IF_ERROR(ValidateTensors(this, kInputs, kOutputs));
  return ValidateSequenceBatching(this);
{%- else %}
  return ValidateTensors(this, kInputs, kOutputs);
{%- endif %}
}
{%- if not sig.accumulator %}

//
// ModelInstanceState: one per instance of the model (instance_group). Triton
// calls an instance's execute from one thread at a time.
//
class ModelInstanceState : public BackendModelInstance {
 public:
  using BackendModelInstance::BackendModelInstance;

  // Answers each request with one response, flagged final (see
  // TRITONBACKEND_ModelInstanceExecute for the error contract).
  TRITONSERVER_Error* ProcessRequests(
      TRITONBACKEND_Request** requests, const uint32_t request_count);

 private:
  BatchExecutor executor_{this};
};

TRITONSERVER_Error*
ModelInstanceState::ProcessRequests(
    TRITONBACKEND_Request** requests, const uint32_t request_count)
{
  Timestamps times;
  SET_TIMESTAMP(times.exec_start_ns);

  // One response factory per request, or none at all and the error, which
  // hands every request back to Triton (see
  // TRITONBACKEND_ModelInstanceExecute).
  std::vector<TRITONBACKEND_ResponseFactory*> raw_factories;
  RETURN_IF_ERROR(NewPerRequest(
      requests, request_count, TRITONBACKEND_ResponseFactoryNew,
      TRITONBACKEND_ResponseFactoryDelete, &raw_factories));
  // From here on the requests are ours: each stream ends with a final flag
  // (an error travels in its final response), and each request is released.
  std::vector<ResponseFactoryPtr> factories;
  std::vector<TRITONBACKEND_Response*> responses(request_count, nullptr);
  for (uint32_t r = 0; r < request_count; ++r) {
    factories.emplace_back(raw_factories[r]);
    TRITONSERVER_Error* err =
        TRITONBACKEND_ResponseNewFromFactory(&responses[r], factories[r].get());
    if (err != nullptr) {
      // No response to carry the error: log it and end the stream.
      LOG_IF_ERROR(err, "failed creating response");
      responses[r] = nullptr;
      LOG_IF_ERROR(
          TRITONBACKEND_ResponseFactorySendFlags(
              factories[r].get(), TRITONSERVER_RESPONSE_COMPLETE_FINAL),
          "failed sending final flag");
    }
  }
  const uint64_t executed_batch_size =
      executor_.Execute(requests, request_count, &responses, &times);

  // Your streaming logic goes here: this sends one response per request with
  // the final flag; to stream, send earlier responses from factories[r] with
  // flags 0 (see the file's first comment).
  for (uint32_t r = 0; r < request_count; ++r) {
    if (responses[r] != nullptr) {
      LOG_IF_ERROR(
          TRITONBACKEND_ResponseSend(
              responses[r], TRITONSERVER_RESPONSE_COMPLETE_FINAL, nullptr),
          "failed sending response");
    }
  }
  SET_TIMESTAMP(times.exec_end_ns);
  ReportStatistics(
      TritonModelInstance(), requests, responses, executed_batch_size, times);

  for (uint32_t r = 0; r < request_count; ++r) {
    LOG_IF_ERROR(
        TRITONBACKEND_RequestRelease(
            requests[r], TRITONSERVER_REQUEST_RELEASE_ALL),
        "failed releasing request");
  }
  return nullptr;  // success: every request is answered and released
}
{%- endif %}
{%- endif %}

{% include "backend_api.cc.j2" %}
}}}  // namespace triton::backend::{{ cookiecutter.backend_name }}
