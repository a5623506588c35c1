// The floor for bench/backends.py: a backend that does nothing but what every backend with the model's tensor
// signature must do. It reads the signature from the model configuration once, at load; per request it reads
// every byte of every input (a sum over each buffer, in place, so it pays the read a real backend pays), and
// writes every output in the configuration's shape (-1 -> 1, the batch dimension from the request): a
// fixed-size output filled with one byte, a BYTES output as one short string per element (the decimal byte
// count of the request's inputs, formatted once per request and copied behind each 4-byte length). No input
// collector, no batching across requests, no validation, no allocation per request. A decoupled model
// (model_transaction_policy { decoupled: true }) streams parameters.floor_responses responses per request
// from the request's response factory, in execute itself (no thread of its own), the final flag on the last.
// Written for the benchmark (built with g++ against Triton's core and common headers, loaded from the model's
// directory as libtriton_floor_ref.so).

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "triton/core/tritonbackend.h"

#define TRITONJSON_STATUSTYPE TRITONSERVER_Error*
#define TRITONJSON_STATUSRETURN(M) \
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, (M).c_str())
#define TRITONJSON_STATUSSUCCESS nullptr
#include "triton/common/triton_json.h"

#define RETURN_IF_ERROR(X)             \
  do {                                 \
    TRITONSERVER_Error* err__ = (X);   \
    if (err__ != nullptr) {            \
      return err__;                    \
    }                                  \
  } while (false)

namespace {

using triton::common::TritonJson;

struct Output {
  std::string name;
  TRITONSERVER_DataType datatype;
  std::vector<int64_t> dims;  // after the batch dimension, -1 as 1
  uint64_t row_elements;
};

struct ModelState {
  bool batching;
  bool decoupled = false;
  uint64_t responses = 1;  // a decoupled model's responses per request
  std::vector<Output> outputs;
};

uint64_t
NowNs()
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TRITONSERVER_Error*
ReadSignature(TRITONBACKEND_Model* model, ModelState* state)
{
  TRITONSERVER_Message* message = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1 /* config_version */, &message));
  const char* buffer = nullptr;
  size_t byte_size = 0;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(message, &buffer, &byte_size);
  TritonJson::Value config;
  if (err == nullptr) {
    err = config.Parse(buffer, byte_size);
  }
  TRITONSERVER_MessageDelete(message);
  RETURN_IF_ERROR(err);

  int64_t max_batch_size = 0;
  RETURN_IF_ERROR(config.MemberAsInt("max_batch_size", &max_batch_size));
  state->batching = max_batch_size > 0;
  TritonJson::Value policy;
  if (config.Find("model_transaction_policy", &policy)) {
    RETURN_IF_ERROR(policy.MemberAsBool("decoupled", &state->decoupled));
  }
  TritonJson::Value parameters;
  TritonJson::Value responses;
  if (config.Find("parameters", &parameters) && parameters.Find("floor_responses", &responses)) {
    std::string count;
    RETURN_IF_ERROR(responses.MemberAsString("string_value", &count));
    state->responses = std::stoull(count);
  }
  TritonJson::Value outputs;
  RETURN_IF_ERROR(config.MemberAsArray("output", &outputs));
  for (size_t i = 0; i < outputs.ArraySize(); ++i) {
    TritonJson::Value output;
    RETURN_IF_ERROR(outputs.IndexAsObject(i, &output));
    Output spec;
    RETURN_IF_ERROR(output.MemberAsString("name", &spec.name));
    std::string data_type;
    RETURN_IF_ERROR(output.MemberAsString("data_type", &data_type));
    data_type = data_type.substr(data_type.rfind('_') + 1);  // TYPE_FP32 -> FP32
    spec.datatype = TRITONSERVER_StringToDataType(data_type == "STRING" ? "BYTES" : data_type.c_str());
    TritonJson::Value dims;
    RETURN_IF_ERROR(output.MemberAsArray("dims", &dims));
    spec.row_elements = 1;
    for (size_t d = 0; d < dims.ArraySize(); ++d) {
      int64_t size = 0;
      RETURN_IF_ERROR(dims.IndexAsInt(d, &size));
      spec.dims.push_back(size < 0 ? 1 : size);
      spec.row_elements *= spec.dims.back();
    }
    if (spec.dims.size() >= 16) {
      return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNSUPPORTED, "the floor serves outputs of up to 15 dims");
    }
    state->outputs.push_back(std::move(spec));
  }
  return nullptr;
}

// A sum over every byte of 'size' bytes at 'data' (eight at a time), so that the read cannot be skipped.
uint64_t
Checksum(const char* data, const uint64_t size)
{
  uint64_t sum = 0;
  uint64_t i = 0;
  for (; i + sizeof(uint64_t) <= size; i += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, data + i, sizeof(word));
    sum += word;
  }
  for (; i < size; ++i) {
    sum += static_cast<unsigned char>(data[i]);
  }
  return sum;
}

// Reads every input of 'request'; its batch size (the first dim of its first input when the model batches),
// the bytes of its inputs and their checksum.
TRITONSERVER_Error*
ReadInputs(
    TRITONBACKEND_Request* request, const bool batching, int64_t* batch_size,
    uint64_t* total_bytes, uint64_t* checksum)
{
  uint32_t input_count = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInputCount(request, &input_count));
  for (uint32_t i = 0; i < input_count; ++i) {
    TRITONBACKEND_Input* input = nullptr;
    RETURN_IF_ERROR(TRITONBACKEND_RequestInputByIndex(request, i, &input));
    const int64_t* shape = nullptr;
    uint32_t dims_count = 0;
    uint64_t byte_size = 0;
    uint32_t buffer_count = 0;
    RETURN_IF_ERROR(TRITONBACKEND_InputProperties(
        input, nullptr, nullptr, &shape, &dims_count, &byte_size, &buffer_count));
    if (i == 0 && batching && dims_count > 0) {
      *batch_size = shape[0];
    }
    *total_bytes += byte_size;
    for (uint32_t b = 0; b < buffer_count; ++b) {
      const void* buffer = nullptr;
      uint64_t size = 0;
      TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
      int64_t memory_type_id = 0;
      RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, b, &buffer, &size, &memory_type, &memory_type_id));
      *checksum += Checksum(static_cast<const char*>(buffer), size);
    }
  }
  return nullptr;
}

// Writes every output of the model into 'response'.
TRITONSERVER_Error*
WriteOutputs(
    const ModelState& state, TRITONBACKEND_Response* response, const int64_t batch_size,
    const uint64_t total_bytes, const uint64_t checksum)
{
  char text[24];
  const size_t text_size = std::to_chars(text, text + sizeof(text), total_bytes).ptr - text;
  int64_t shape[16];
  for (const Output& spec : state.outputs) {
    uint32_t dims_count = 0;
    if (state.batching) {
      shape[dims_count++] = batch_size;
    }
    for (const int64_t d : spec.dims) {
      shape[dims_count++] = d;
    }
    const uint64_t elements = spec.row_elements * (state.batching ? batch_size : 1);
    const bool bytes = spec.datatype == TRITONSERVER_TYPE_BYTES;
    const uint64_t byte_size =
        bytes ? elements * (sizeof(uint32_t) + text_size) : elements * TRITONSERVER_DataTypeByteSize(spec.datatype);
    TRITONBACKEND_Output* output = nullptr;
    RETURN_IF_ERROR(
        TRITONBACKEND_ResponseOutput(response, &output, spec.name.c_str(), spec.datatype, shape, dims_count));
    void* buffer = nullptr;
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_type_id = 0;
    RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, byte_size, &memory_type, &memory_type_id));
    char* out = static_cast<char*>(buffer);
    if (!bytes) {
      std::memset(out, static_cast<int>(checksum & 0x7f), byte_size);
      continue;
    }
    const unsigned char prefix[sizeof(uint32_t)] = {static_cast<unsigned char>(text_size), 0, 0, 0};
    for (uint64_t e = 0; e < elements; ++e) {
      std::memcpy(out, prefix, sizeof(prefix));
      std::memcpy(out + sizeof(prefix), text, text_size);
      out += sizeof(prefix) + text_size;
    }
  }
  return nullptr;
}

// A decoupled model's stream: state.responses responses from the request's factory, each with every output,
// the final flag on the last (alone when there are none); 'err' (the inputs could not be read) or a failure
// ends the stream in a response that carries it. Returns the error, which the caller deletes.
TRITONSERVER_Error*
Stream(
    const ModelState& state, TRITONBACKEND_Request* request, const int64_t batch_size, const uint64_t total_bytes,
    const uint64_t checksum, TRITONSERVER_Error* err)
{
  TRITONBACKEND_ResponseFactory* factory = nullptr;
  TRITONSERVER_Error* factory_err = TRITONBACKEND_ResponseFactoryNew(&factory, request);
  if (factory_err != nullptr) {
    TRITONSERVER_ErrorDelete(err);
    return factory_err;
  }
  bool final_sent = false;
  for (uint64_t i = 0; !final_sent && (i < state.responses || err != nullptr); ++i) {
    TRITONBACKEND_Response* response = nullptr;
    TRITONSERVER_Error* new_err = TRITONBACKEND_ResponseNewFromFactory(&response, factory);
    if (new_err != nullptr) {
      TRITONSERVER_ErrorDelete(err);
      err = new_err;
      break;
    }
    if (err == nullptr) {
      err = WriteOutputs(state, response, batch_size, total_bytes, checksum);
    }
    final_sent = err != nullptr || i + 1 == state.responses;
    TRITONSERVER_Error* send_err =
        TRITONBACKEND_ResponseSend(response, final_sent ? TRITONSERVER_RESPONSE_COMPLETE_FINAL : 0, err);
    if (send_err != nullptr) {
      TRITONSERVER_ErrorDelete(send_err);
    }
  }
  if (!final_sent) {
    TRITONSERVER_Error* flags_err = TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    if (flags_err != nullptr) {
      TRITONSERVER_ErrorDelete(flags_err);
    }
  }
  TRITONSERVER_Error* delete_err = TRITONBACKEND_ResponseFactoryDelete(factory);
  if (delete_err != nullptr) {
    TRITONSERVER_ErrorDelete(delete_err);
  }
  return err;
}

}  // namespace

extern "C" {

TRITONSERVER_Error*
TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model)
{
  auto* state = new ModelState();
  TRITONSERVER_Error* err = ReadSignature(model, state);
  if (err == nullptr) {
    err = TRITONBACKEND_ModelSetState(model, state);
  }
  if (err != nullptr) {
    delete state;
  }
  return err;
}

TRITONSERVER_Error*
TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model)
{
  void* state = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  delete static_cast<ModelState*>(state);
  return nullptr;
}

TRITONSERVER_Error*
TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count)
{
  TRITONBACKEND_Model* model = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* vstate = nullptr;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &vstate));
  const ModelState& state = *static_cast<const ModelState*>(vstate);

  const uint64_t exec_start = NowNs();
  uint64_t total_batch = 0;
  for (uint32_t r = 0; r < request_count; ++r) {
    TRITONBACKEND_Request* request = requests[r];
    const uint64_t start = NowNs();
    int64_t batch_size = 1;
    uint64_t total_bytes = 0;
    uint64_t checksum = 0;
    TRITONSERVER_Error* err = ReadInputs(request, state.batching, &batch_size, &total_bytes, &checksum);
    if (state.decoupled) {
      err = Stream(state, request, batch_size, total_bytes, checksum, err);
    } else {
      TRITONBACKEND_Response* response = nullptr;
      TRITONSERVER_Error* new_err = TRITONBACKEND_ResponseNew(&response, request);
      if (err == nullptr && new_err == nullptr) {
        err = WriteOutputs(state, response, batch_size, total_bytes, checksum);
      }
      if (new_err != nullptr) {
        TRITONSERVER_ErrorDelete(new_err);
      } else {
        TRITONSERVER_Error* send_err = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
        if (send_err != nullptr) {
          TRITONSERVER_ErrorDelete(send_err);
        }
      }
    }
    const uint64_t end = NowNs();
    TRITONSERVER_Error* stats_err =
        TRITONBACKEND_ModelInstanceReportStatistics(instance, request, err == nullptr, start, start, end, end);
    if (stats_err != nullptr) {
      TRITONSERVER_ErrorDelete(stats_err);
    }
    if (err != nullptr) {
      TRITONSERVER_ErrorDelete(err);
    }
    total_batch += batch_size;
    TRITONSERVER_Error* release_err = TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (release_err != nullptr) {
      TRITONSERVER_ErrorDelete(release_err);
    }
  }
  const uint64_t exec_end = NowNs();
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceReportBatchStatistics(
      instance, total_batch, exec_start, exec_start, exec_end, exec_end);
  if (err != nullptr) {
    TRITONSERVER_ErrorDelete(err);
  }
  return nullptr;
}

}  // extern "C"
