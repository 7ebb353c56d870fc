"""A TF Serving client for the exported translator: REST and gRPC.

Usage, with a server started as in serving/README.md:

    python serving/client.py "21 Nov 2026" "Saturday, 3rd of May 1999"            # REST, port 8501
    python serving/client.py --grpc localhost:8500 "21 Nov 2026"                  # gRPC, port 8500

Prints one translation per input. The model's ``serving_default`` signature
takes ``inputs``, a ``(B,)`` string tensor, and returns ``outputs`` (``(B,)``
strings) and ``output_ids``. Needs only TensorFlow and tensorflow-serving-api
(gRPC) or nothing beyond the standard library (REST), not keras-seq.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.request

MODEL_NAME = "translator"
SIGNATURE = "serving_default"


def _rest_instance(text: str | bytes):
    """A string for the REST API; bytes that are not UTF-8 go as ``{"b64": ...}``."""
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(text).decode("ascii")}
    return text


def rest_body(texts: list[str | bytes], signature: str = SIGNATURE) -> bytes:
    """The JSON body of a REST ``:predict`` request in the row format."""
    body = {"signature_name": signature, "instances": [_rest_instance(t) for t in texts]}
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def predict_rest(
    texts: list[str | bytes],
    url: str = "http://localhost:8501",
    model: str = MODEL_NAME,
    signature: str = SIGNATURE,
    timeout: float = 30.0,
) -> list[str]:
    """Translations of ``texts`` from TF Serving's REST API (``/v1/models/<model>:predict``)."""
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/models/{model}:predict",
        data=rest_body(texts, signature),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        predictions = json.loads(response.read().decode("utf-8"))["predictions"]
    # One output per signature: rows are dicts; TF Serving returns bare values
    # only for single-output signatures.
    return [p["outputs"] if isinstance(p, dict) else p for p in predictions]


def predict_request(
    texts: list[str | bytes], model: str = MODEL_NAME, signature: str = SIGNATURE
):
    """The gRPC ``PredictRequest`` for ``texts`` (a ``(B,)`` tf.string tensor ``inputs``)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    strings = [t if isinstance(t, bytes) else t.encode("utf-8") for t in texts]
    request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(strings, dtype=tf.string, shape=[len(strings)]))
    request.output_filter.append("outputs")
    return request


def predict_grpc(
    texts: list[str | bytes],
    target: str = "localhost:8500",
    model: str = MODEL_NAME,
    signature: str = SIGNATURE,
    timeout: float = 30.0,
) -> list[str]:
    """Translations of ``texts`` from TF Serving's gRPC ``PredictionService``."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        response = stub.Predict(predict_request(texts, model, signature), timeout=timeout)
    outputs = tf.make_ndarray(response.outputs["outputs"])
    return [s.decode("utf-8", errors="replace") for s in outputs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("texts", metavar="TEXT", nargs="+")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--rest", default="http://localhost:8501", help="REST base URL")
    where.add_argument("--grpc", metavar="HOST:PORT", help="use gRPC at HOST:PORT instead")
    parser.add_argument("--model", default=MODEL_NAME)
    args = parser.parse_args(argv)
    if args.grpc:
        outputs = predict_grpc(args.texts, args.grpc, args.model)
    else:
        outputs = predict_rest(args.texts, args.rest, args.model)
    for output in outputs:
        print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
