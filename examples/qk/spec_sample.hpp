// The text `qk spec` replays when it is given no file (spec.hpp): about 90 lines kept apart so
// that spec.hpp reads as code.
#pragma once

#include <string_view>

namespace qk_tool {

// The built-in sample: documentation-like text, where names, phrases and whole sentence shapes
// recur, which is the case n-gram drafting is for. Paragraphs rather than one literal because
// compilers need only accept string literals of a few thousand characters.
inline constexpr std::string_view spec_sample[] = {
    R"(# ringlog: a fixed-size event log for embedded services

ringlog keeps the most recent events of a service in a ring of fixed-size records. A record
holds a timestamp, a severity, a source identifier and up to 96 bytes of message text. When the
ring is full, the oldest record is overwritten by the newest one, so the log never allocates
after it is created and never blocks the thread that writes to it.

## Creating a log

Call ringlog_create(capacity, flags) to create a log with room for capacity records. The
capacity is rounded up to a power of two. The flags select the clock used for timestamps:
RINGLOG_CLOCK_MONOTONIC (the default) or RINGLOG_CLOCK_REALTIME. ringlog_create returns a
pointer to the new log, or NULL when the capacity is zero or the memory cannot be allocated.
Call ringlog_destroy(log) to release the log and every record in it.
)",
    R"(
## Writing records

Call ringlog_write(log, severity, source, message) to append a record to the log. The severity
is one of RINGLOG_DEBUG, RINGLOG_INFO, RINGLOG_WARNING and RINGLOG_ERROR. The source is a small
integer that identifies the part of the service that wrote the record. The message is copied
into the record; a message longer than 96 bytes is cut at 96 bytes. ringlog_write returns 0 on
success and -1 when the severity is not one of the four severities.

Call ringlog_writef(log, severity, source, format, ...) to append a record whose message is
formatted as printf would format it. ringlog_writef returns 0 on success and -1 when the
severity is not one of the four severities or the format is NULL.

Writing is lock-free: several threads may write to the same log at the same time. Each writer
claims a record with one atomic increment of the write counter, fills the record, and then
publishes it by storing its sequence number. A reader never sees a record that is only half
written, because it checks the sequence number before and after it copies the record.
)",
    R"(
## Reading records

Call ringlog_read(log, cursor, record) to copy the next record after the cursor into record.
The cursor starts at zero and is advanced by every successful read. ringlog_read returns 0 on
success, 1 when there is no record after the cursor yet, and -1 when the record after the cursor
has already been overwritten. After -1, call ringlog_oldest(log) to move the cursor to the
oldest record that is still in the log, and read again.

Call ringlog_count(log) to get the number of records written since the log was created. Call
ringlog_capacity(log) to get the number of records the log can hold. The difference between
the two, when it is positive, is the number of records that have been overwritten.

## Example

    ringlog *log = ringlog_create(1024, RINGLOG_CLOCK_MONOTONIC);
    ringlog_write(log, RINGLOG_INFO, 1, "service started");
    ringlog_writef(log, RINGLOG_WARNING, 2, "queue %d is %d%% full", 3, 90);
    ringlog_writef(log, RINGLOG_ERROR, 2, "queue %d is full, dropping request %u", 3, 4711u);

    ringlog_record record;
    uint64_t cursor = 0;
    while (ringlog_read(log, &cursor, &record) == 0) {
        printf("%llu %s %u %s\n", record.timestamp, ringlog_severity_name(record.severity),
               record.source, record.message);
    }
    ringlog_destroy(log);
)",
    R"(
## Errors

Every function that takes a log returns -1 when the log is NULL, except ringlog_destroy, which
does nothing when the log is NULL, and ringlog_count and ringlog_capacity, which return 0 when
the log is NULL. No function sets errno, and no function writes to standard error.

## Thread safety

ringlog_write and ringlog_writef may be called from several threads at the same time.
ringlog_read may be called from several threads at the same time, each with its own cursor.
ringlog_create and ringlog_destroy must not be called while another thread uses the log.
ringlog_count and ringlog_capacity may be called from any thread at any time.

## Frequently asked questions

Why does ringlog_write not block when the log is full? Because the log is for the most recent
events, and a writer that blocked would delay the service to keep events that nobody will read.

Why is the message cut at 96 bytes? Because a record of 128 bytes fits two cache lines on most
machines, and the timestamp, the severity and the source take the rest of the record.

Why does ringlog_read return -1 instead of skipping to the oldest record? Because a reader that
falls behind should know that it lost records; call ringlog_oldest(log) to skip to the oldest
record, and ringlog_count(log) to know how many records were lost.
)",
};

} // namespace qk_tool
