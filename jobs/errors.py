"""Data errors, and how a job tells its caller that a retry would not help.

A :class:`DataError` is a problem with the input (a missing partition, a failed validation, no
model to score with): running the job again on the same lake fails the same way. A job started
with :func:`jobs.runner.run_job` exits with :data:`DATA_ERROR_EXIT` on one and writes the message to the file
named by ``PIPELINE_ERROR_FILE`` when that is set; the Airflow operator (orchestration/spark_jobs.py)
turns that into a failure without retries that carries the message. Anything else (a lost
executor, an unreachable tracking server, a killed process) exits non-zero in the usual way and is
retried. Either way the log ends with one line that says what went wrong and what to do (a
message of several lines gives its details first); the traceback is logged at debug level only
(``PIPELINE_LOG_LEVEL=DEBUG`` shows it), so a task log ends with what went wrong, not with the last
line of 80 lines of stack. Spark's own stack traces of failed tasks are kept out below debug level
too (:func:`jobs.runtime.session.quiet_task_failures`).

A file in a zone that is not Parquet (a stray CSV, a truncated or half-copied file, a damaged
footer) is a data problem too: the jobs would fail on it every time, so it exits as one, naming the
file, its partition and the command that rebuilds the day (:func:`data_problem`,
:func:`damaged_parquet`; the readers also check a zone's partitions before reading them:
:mod:`jobs.lake.integrity`). A
full disk is a fault (space may be freed before the retry) whose one line says so
(:func:`disk_full`) instead of the first line of a Spark stack trace.
"""

from __future__ import annotations

import errno
import re

from jobs.lake.layout import partition_of, rebuild_command

DATA_ERROR_EXIT = 65  # EX_DATAERR of sysexits.h
USAGE_EXIT = 64  # EX_USAGE of sysexits.h: the config or the command line is wrong (jobs.config.ConfigError)
ERROR_FILE_ENV = "PIPELINE_ERROR_FILE"


class DataError(Exception):
    """The input is wrong or missing: retrying will not help; the message says what to do."""


NOT_PARQUET = re.compile(r"(\S+) is not a Parquet file")  # Spark's words for a file without Parquet's magic
# Spark's words for a file it failed to read; a data problem only with one of DAMAGED's words too (a
# lost connection to an object store fails a read the same way, and is a fault).
FAILED_READ = re.compile(r"\[FAILED_READ_FILE\.\w+\] Encountered error while reading file (\S+?)\.?(?:\s|$)")
DAMAGED = re.compile(
    r"CANNOT_READ_FILE_FOOTER|Could not read footer|is not a Parquet file|Expected magic number|EOFException"
    r"|ChecksumException|ParquetDecodingException|can not read class org\.apache\.parquet\.format"
    r"|TProtocolException|Parquet magic bytes not found|Couldn't deserialize thrift|Parquet file size is"
)


def lake_path(uri: str) -> str:
    """A path as Spark writes it in a message (``file:/tmp/x``, ``file:///tmp/x``) as the lake spells it."""
    return re.sub(r"^file:(?://)?(?=/)", "", uri)


def damaged_parquet(uri: str, reason: str) -> str:
    """What to say about a file of a zone that cannot be read as Parquet (truncated, damaged, not
    Parquet at all): the file, its partition and the command that writes the partition again."""
    path = lake_path(uri)
    found, command = partition_of(path), rebuild_command(path)
    where = f" in the partition {found[0]}" if found else ""
    todo = (f"rebuild the day, which replaces the whole partition: {command}" if command
            else "restore the file from where it came from")
    return (f"{path}{where} cannot be read as Parquet ({reason}): the file is truncated, damaged or not Parquet. "
            f"A zone of the lake holds only what the jobs write: move the file out of the lake if it is not one of "
            f"theirs, and {todo}; then run the task again")


def data_problem(err: BaseException) -> str | None:
    """What makes ``err`` a data problem although it is not a :class:`DataError` (Spark's reader
    meeting a file of a zone that is truncated, damaged or not Parquet), in words with what to do
    (the file, its partition, the command that rebuilds it); else None."""
    text = str(err)
    damage = DAMAGED.search(text)
    if damage is None:
        return None
    found = FAILED_READ.search(text) or NOT_PARQUET.search(text)
    if found is None:  # pyarrow's words name no file: the reader that knows it says (damaged_parquet)
        return None
    return damaged_parquet(found.group(1), damage.group(0))


DISK_FULL = re.compile(r"No space left on device")  # ENOSPC, in Python's words and in the JVM's


def disk_full(err: BaseException) -> str | None:
    """``err`` (or what caused it, a Java exception in a Py4J error's text included) is a write
    that found no space left on its disk: in words with what to do; else None."""
    seen: BaseException | None = err
    while seen is not None:
        if (isinstance(seen, OSError) and seen.errno == errno.ENOSPC) or DISK_FULL.search(str(seen)):
            where = getattr(seen, "filename", None)
            return (f"the disk is full (No space left on device{f': {where}' if where else ''}): free space on "
                    "the lake's disk (or give it a larger one) and run the task again; what the lake held "
                    "before this run is intact")
        # pyspark keeps the Java cause of a captured exception apart from Python's chain
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "_cause", None)
    return None


PY4J_CALL = "An error occurred while calling"  # the first line of every Py4JJavaError
JAVA_PACKAGE = re.compile(r"^(?:[a-z_$][\w$]*\.)+(?=[A-Z])")  # org.apache.spark. in org.apache.spark.SparkException
# Where a Java exception's message ends: its stack frames, its causes, a Python worker's traceback.
PYTHON_TRACE = "Traceback (most recent call last):"
TRACE_LINE = re.compile(r'^(at |Caused by:|Suppressed:|\.\.\. \d+ more$|Traceback |File ")')


def headline(err: BaseException, limit: int = 600) -> str:
    """An exception in one line: its type and the first line of its message (Py4J's Java stack
    traces and Python's causes left out). For a Java exception raised through Py4J, whose first line
    only names the JVM method called, the Java exception's message instead: its first two lines
    before any stack trace, joined (a failed Spark stage's reason, a lost executor say, is on the
    second). For an exception a Python worker raised (``PythonException: An exception was thrown
    from the Python worker:``), the worker's own exception is added from the end of its traceback."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if first.endswith(":") and PYTHON_TRACE in lines:
        # a Python worker's exception (a UDF's, a pandas function's): the line its traceback ends with
        raw = str(err).splitlines()
        trace = raw[next(i for i, line in enumerate(raw) if line.strip() == PYTHON_TRACE) + 1:]
        raised = next((line.strip() for line in trace if line.strip() and not line[0].isspace()), None)
        first = f"{first} {raised}" if raised else first
    if first.startswith(PY4J_CALL) and len(lines) > 1:
        java = []
        for line in lines[1:3]:
            if TRACE_LINE.match(line):
                break
            java.append(line.removeprefix(": "))
        if java:
            first = " ".join([JAVA_PACKAGE.sub("", java[0]), *java[1:]])
    text = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
