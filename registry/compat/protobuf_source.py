"""`.proto` source compiled by protoc (from grpcio-tools) into a normalised descriptor.

The registry never parses Protocol Buffers itself: protoc compiles each definition, and what
the registry keeps and compares is the ``FileDescriptorProto`` it produces. protoc writes
options in field-number order and leaves comments and spacing out, so two definitions that
differ only in those compile to the same bytes: the same schema, the same id.
"""

from __future__ import annotations

import ast
import base64
import functools
import os
import tempfile
from pathlib import Path
from typing import Any

import grpc_tools
from google.protobuf import descriptor_pb2
from grpc_tools import _protoc_compiler

from changebroker.registry.compat.model import SchemaError

FILE_NAME = "schema.proto"  # what every definition is compiled as; imports name other files
DEFINITION_KEY = "fileDescriptorProto"  # the decoded definition: {this: base64 of the bytes}
# The well-known types (google/protobuf/*.proto) grpcio-tools ships beside protoc.
_WELL_KNOWN = Path(grpc_tools.__file__).parent / "_proto"


def proto_definition(source: Any) -> dict[str, str]:
    """The decoded definition of ``.proto`` text: its descriptor, deterministically
    serialised; SchemaError with protoc's message (line and column) when it does not
    compile."""
    if not isinstance(source, str):
        raise SchemaError("a PB schemaDefinition is the text of a .proto file, as a JSON string")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:
        raise SchemaError(
            "the .proto text holds a lone UTF-16 surrogate: send Unicode text"
        ) from None
    return {DEFINITION_KEY: _compiled(source)}


def encoded_descriptor(definition: Any) -> str:
    """The base64 descriptor a decoded definition holds."""
    encoded = definition.get(DEFINITION_KEY) if isinstance(definition, dict) else None
    if not isinstance(encoded, str):
        raise SchemaError("not a compiled PB definition")
    return encoded


def file_descriptor(encoded: str) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(encoded))


@functools.lru_cache(maxsize=256)
def _compiled(source: str) -> str:
    """Compiles in a directory of its own, so an import can name only the well-known types."""
    with tempfile.TemporaryDirectory(prefix="registry-proto-") as directory:
        (Path(directory) / FILE_NAME).write_text(source, encoding="utf-8")
        try:
            generated = _protoc_compiler.get_protos(
                FILE_NAME.encode(), [os.fsencode(directory), os.fsencode(_WELL_KNOWN)]
            )
        except _protoc_compiler.ProtocErrors as failure:
            raise SchemaError(_compiler_message(failure.errors())) from None
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(_serialized_file(generated))
    if descriptor.syntax not in ("", "proto2", "proto3"):
        raise SchemaError(
            f'syntax "{descriptor.syntax}" is not supported: declare syntax = "proto3" or "proto2"'
        )
    if not descriptor.syntax:
        descriptor.syntax = "proto2"  # protoc's own default, said once
    return base64.b64encode(descriptor.SerializeToString(deterministic=True)).decode("ascii")


def _compiler_message(errors: list[Any]) -> str:
    """protoc's errors as it prints them, lines and columns counted from 1."""
    lines = []
    for error in errors:
        where = error.filename.decode(errors="replace")
        if where == FILE_NAME:
            where = f"line {error.line + 1}, column {error.column + 1}"
        lines.append(f"{where}: {error.message.decode(errors='replace')}")
    return "; ".join(lines)


def _serialized_file(generated: list[tuple[bytes, bytes]]) -> bytes:
    """The ``FileDescriptorProto`` protoc embeds in the Python module it generates for the
    definition (``AddSerializedFile(b'...')``): the descriptor, in its own serialisation."""
    module = dict(generated)[FILE_NAME.removesuffix(".proto").encode() + b"_pb2.py"]
    for node in ast.walk(ast.parse(module)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    raise RuntimeError("protoc's Python output holds no serialized descriptor")
