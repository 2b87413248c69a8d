#!/usr/bin/env python3
"""How much a handoff's transaction could gain by going in one packet.

An experiment for issue #21 (not a lockbench scenario): on one connection
to the MariaDB at 127.0.0.1:3306, a chain of handoffs of one key's row,
each a transaction as the broker runs it today (two packets: `BEGIN` with
the row's `SELECT ... FOR UPDATE`, then the lease `UPDATE`, two history
`INSERT`s and the `COMMIT`), against the same transaction in one packet
(a conditional `UPDATE` that checks the releasing owner, token, hold and
queue in SQL, the events inserted only if it matched, the new lease read
back, the `COMMIT`), and against the one-row autocommit `UPDATE` that
lockbench's `mysql-commit` baseline runs. Rounds alternate; the medians of
the rounds' rates and p50s are printed. No broker, no HTTP: the ceiling of
what dropping the read's round trip could give the contended chain.

    pip install pymysql && bench/experiments/handoff_packets.py [--rounds 7] [--n 1500]
"""
import argparse
import statistics
import time

import pymysql
from pymysql.constants import CLIENT

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=7)
parser.add_argument("--n", type=int, default=1500, help="transactions per round and variant")
parser.add_argument("--port", type=int, default=3306)
args = parser.parse_args()

conn = pymysql.connect(host="127.0.0.1", port=args.port, user="root",
                       client_flag=CLIENT.MULTI_STATEMENTS, autocommit=True)
cur = conn.cursor()
DB = "handoff_packets_experiment"
for sql in [
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    f"DROP DATABASE IF EXISTS {DB}",
    f"CREATE DATABASE {DB}",
    f"USE {DB}",
    """CREATE TABLE locks (lock_key VARBINARY(255) PRIMARY KEY, owner VARBINARY(255),
       token BIGINT UNSIGNED NOT NULL, hold_count INT UNSIGNED NOT NULL,
       expires_at DATETIME(6), queued INT UNSIGNED NOT NULL, released_by BIGINT UNSIGNED)""",
    """CREATE TABLE lock_events (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
       lock_key VARBINARY(255) NOT NULL, event TINYINT UNSIGNED NOT NULL,
       owner VARBINARY(255) NOT NULL, token BIGINT UNSIGNED NOT NULL, at DATETIME(6) NOT NULL)""",
    "CREATE TABLE commits (id INT PRIMARY KEY, n BIGINT UNSIGNED NOT NULL)",
    "INSERT INTO locks VALUES ('k', 'o0', 0, 1, NOW(6) + INTERVAL 1 HOUR, 0, NULL)",
    "INSERT INTO commits VALUES (1, 0)",
]:
    cur.execute(sql)


def run(sql):
    cur.execute(sql)
    rows = cur.fetchall()
    while cur.nextset():
        rows = cur.fetchall() or rows
    return rows


def two_packets(i):
    run("BEGIN; SELECT owner, token, hold_count, expires_at, queued, released_by, NOW(6) "
        "FROM locks WHERE lock_key = 'k' FOR UPDATE")
    run(f"UPDATE locks SET owner = 'o{i}', token = {i}, hold_count = 1, "
        f"expires_at = NOW(6) + INTERVAL 30 SECOND, released_by = {i} WHERE lock_key = 'k'; "
        f"INSERT INTO lock_events (lock_key, event, owner, token, at) VALUES "
        f"('k', 1, 'o{i - 1}', {i - 1}, NOW(6)), ('k', 2, 'o{i}', {i}, NOW(6)); COMMIT")


def one_packet(i):
    rows = run(
        f"BEGIN; UPDATE locks SET owner = 'o{i}', token = token + 1, hold_count = 1, "
        f"expires_at = NOW(6) + INTERVAL 30 SECOND, released_by = {i} "
        f"WHERE lock_key = 'k' AND owner = 'o{i - 1}' AND token = {i - 1} AND hold_count = 1 "
        f"AND expires_at > NOW(6) AND queued = 0; SET @handed = ROW_COUNT(); "
        f"INSERT INTO lock_events (lock_key, event, owner, token, at) "
        f"SELECT 'k', 1, 'o{i - 1}', {i - 1}, NOW(6) FROM DUAL WHERE @handed = 1 UNION ALL "
        f"SELECT 'k', 2, 'o{i}', {i}, NOW(6) FROM DUAL WHERE @handed = 1; "
        f"SELECT @handed, token, expires_at FROM locks WHERE lock_key = 'k'; COMMIT")
    assert rows[0][0] == 1 and rows[0][1] == i, rows


def one_commit(i):
    run(f"UPDATE commits SET n = {i} WHERE id = 1")


variants = {"two packets (today)": two_packets, "one packet": one_packet,
            "one-row autocommit UPDATE": one_commit}
results = {name: [] for name in variants}
i = 0
for _ in range(args.rounds):
    for name, handoff in variants.items():
        if handoff is not one_commit:
            # The chain goes on from the row's token.
            i = run("SELECT token FROM locks WHERE lock_key = 'k'")[0][0]
        latencies = []
        started = time.perf_counter()
        for _ in range(args.n):
            i += 1
            sent = time.perf_counter()
            handoff(i)
            latencies.append(time.perf_counter() - sent)
        elapsed = time.perf_counter() - started
        results[name].append((args.n / elapsed, statistics.median(latencies) * 1000))
cur.execute(f"DROP DATABASE {DB}")

base = statistics.median(r for r, _ in results["two packets (today)"])
print(f"| transaction ({args.rounds} rounds of {args.n}) | per s (median) | p50 ms (median) | rate ÷ two packets |")
print("|---|---|---|---|")
for name, rounds in results.items():
    rate = statistics.median(r for r, _ in rounds)
    p50 = statistics.median(p for _, p in rounds)
    print(f"| {name} | {rate:,.0f} | {p50:.3f} | {rate / base:.2f} |")
