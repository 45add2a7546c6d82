import builtins as _builtins
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ValuePb(_message.Message):
    __slots__ = ("string", "int", "uint", "double", "bytes", "bool", "timestamp")
    STRING_FIELD_NUMBER: _ClassVar[_builtins.int]
    INT_FIELD_NUMBER: _ClassVar[_builtins.int]
    UINT_FIELD_NUMBER: _ClassVar[_builtins.int]
    DOUBLE_FIELD_NUMBER: _ClassVar[_builtins.int]
    BYTES_FIELD_NUMBER: _ClassVar[_builtins.int]
    BOOL_FIELD_NUMBER: _ClassVar[_builtins.int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[_builtins.int]
    string: _builtins.str
    int: _builtins.int
    uint: _builtins.int
    double: _builtins.float
    bytes: _builtins.bytes
    bool: _builtins.bool
    timestamp: _builtins.int
    def __init__(self, string: _Optional[_builtins.str] = ..., int: _Optional[_builtins.int] = ..., uint: _Optional[_builtins.int] = ..., double: _Optional[_builtins.float] = ..., bytes: _Optional[_builtins.bytes] = ..., bool: _Optional[_builtins.bool] = ..., timestamp: _Optional[_builtins.int] = ...) -> None: ...

class ColumnPb(_message.Message):
    __slots__ = ("name", "value", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: ValuePb
    type: int
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[ValuePb, _Mapping]] = ..., type: _Optional[int] = ...) -> None: ...

class ChangePb(_message.Message):
    __slots__ = ("operation", "table", "sequence", "commitSequence", "changeSequence", "commitIndex", "transactionID", "newColumns", "oldColumns", "timestamp", "transactionIDEpoch")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    COMMITSEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CHANGESEQUENCE_FIELD_NUMBER: _ClassVar[int]
    COMMITINDEX_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONID_FIELD_NUMBER: _ClassVar[int]
    NEWCOLUMNS_FIELD_NUMBER: _ClassVar[int]
    OLDCOLUMNS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONIDEPOCH_FIELD_NUMBER: _ClassVar[int]
    operation: int
    table: str
    sequence: str
    commitSequence: int
    changeSequence: int
    commitIndex: int
    transactionID: int
    newColumns: _containers.RepeatedCompositeFieldContainer[ColumnPb]
    oldColumns: _containers.RepeatedCompositeFieldContainer[ColumnPb]
    timestamp: int
    transactionIDEpoch: int
    def __init__(self, operation: _Optional[int] = ..., table: _Optional[str] = ..., sequence: _Optional[str] = ..., commitSequence: _Optional[int] = ..., changeSequence: _Optional[int] = ..., commitIndex: _Optional[int] = ..., transactionID: _Optional[int] = ..., newColumns: _Optional[_Iterable[_Union[ColumnPb, _Mapping]]] = ..., oldColumns: _Optional[_Iterable[_Union[ColumnPb, _Mapping]]] = ..., timestamp: _Optional[int] = ..., transactionIDEpoch: _Optional[int] = ...) -> None: ...

class ChangeListPb(_message.Message):
    __slots__ = ("lastSequence", "firstSequence", "changes")
    LASTSEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FIRSTSEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    lastSequence: str
    firstSequence: str
    changes: _containers.RepeatedCompositeFieldContainer[ChangePb]
    def __init__(self, lastSequence: _Optional[str] = ..., firstSequence: _Optional[str] = ..., changes: _Optional[_Iterable[_Union[ChangePb, _Mapping]]] = ...) -> None: ...

class SnapshotHeaderPb(_message.Message):
    __slots__ = ("timestamp", "snapshot")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    timestamp: str
    snapshot: str
    def __init__(self, timestamp: _Optional[str] = ..., snapshot: _Optional[str] = ...) -> None: ...

class TableHeaderPb(_message.Message):
    __slots__ = ("name", "columns")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    name: str
    columns: _containers.RepeatedCompositeFieldContainer[ColumnPb]
    def __init__(self, name: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[ColumnPb, _Mapping]]] = ...) -> None: ...

class RowPb(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[ValuePb]
    def __init__(self, values: _Optional[_Iterable[_Union[ValuePb, _Mapping]]] = ...) -> None: ...

class StreamMessagePb(_message.Message):
    __slots__ = ("table", "row")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    table: TableHeaderPb
    row: RowPb
    def __init__(self, table: _Optional[_Union[TableHeaderPb, _Mapping]] = ..., row: _Optional[_Union[RowPb, _Mapping]] = ...) -> None: ...
