"""Seeded rows for the two query sets' schemas, with the values their queries filter on.

The sets were written against real data (ClickBench's ``hits``, a 2014 on-time flights sample) that is not here.
These generators give every column its schema's type and, for the columns the queries name, values and
cardinalities that make the queries select something: ClickBench's CounterID 62 in July 2013, searches that are
mostly empty, URLs and titles that sometimes mention Google, the one UserID and hashes the queries look up; the
flights' carriers, airports, cities, states, tail numbers and time blocks that Pinot's queries compare with, and
multi-value columns of 1–5 values (the set's schema is the "nonulls" one). Vectorised with numpy, so 10M rows
take seconds, and the same ``seed`` gives the same rows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.config import Schema

_ARROW = {"INT": pa.int32(), "LONG": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(),
          "STRING": pa.string()}


def _typed(schema: Schema, columns: dict[str, Any], n: int) -> pa.Table:
    """Every schema column, from ``columns`` or a zero / empty default, in the schema's types."""
    arrays = []
    for spec in schema.fields:
        base = _ARROW[spec.data_type.value]
        value = columns.get(spec.name)
        if spec.single_value:
            if value is None:
                value = np.zeros(n, dtype=np.int64) if base != pa.string() else np.full(n, "", dtype=object)
            arrays.append(pa.array(value, type=base))
        else:
            if value is None:
                value = [[0] if base != pa.string() else [""] for _ in range(n)]
            arrays.append(value if isinstance(value, pa.Array) else pa.array(value, type=pa.list_(base)))
    return pa.Table.from_arrays(arrays, names=[f.name for f in schema.fields])


def _pick(rng: np.random.Generator, pool: list[Any] | np.ndarray, n: int, skew: float = 0.0) -> np.ndarray:
    """``n`` draws from ``pool``; ``skew`` > 0 favours its first entries (a Zipf-like head)."""
    pool_array = np.asarray(pool, dtype=object if isinstance(pool[0], str) else None)
    if skew <= 0:
        return pool_array[rng.integers(0, len(pool_array), n)]
    weights = 1.0 / np.arange(1, len(pool_array) + 1) ** skew
    return pool_array[rng.choice(len(pool_array), n, p=weights / weights.sum())]


def _mostly(rng: np.random.Generator, n: int, share: float, value: Any, other: np.ndarray) -> np.ndarray:
    """``value`` in about ``share`` of the rows, ``other`` elsewhere."""
    out = other.copy()
    out[rng.random(n) < share] = value
    return out


# ---- ClickBench: hits ----------------------------------------------------------------------------------------

HITS_USER = 435090932899640449  # the UserID query 20 looks up
HITS_REFERER_HASH = 3594120000172545465
HITS_URL_HASH = 2868770270353813622


def hits(n: int, seed: int = 1) -> pa.Table:
    from cuvee.testing.compat.queries import CLICKBENCH, schema

    rng = np.random.default_rng(seed)
    users = np.concatenate([[HITS_USER], rng.integers(1, 2**62, max(n // 8, 10))])
    day = rng.integers(0, 31, n)
    seconds = rng.integers(0, 86_400, n)
    start = dt.datetime(2013, 7, 1)
    base = np.datetime64(start, "s") + day.astype("timedelta64[D]") + seconds.astype("timedelta64[s]")
    event_time = np.datetime_as_string(base, unit="s")
    phrases = np.array([f"phrase {i}" for i in range(max(n // 20, 50))], dtype=object)
    sites = np.array([f"http://site{i}.ru/page{j}" for i in range(60) for j in range(20)], dtype=object)
    google = np.array([f"http://www.google.com/search?q={i}" for i in range(40)]
                      + [f"http://maps.google.ru/place/{i}" for i in range(10)], dtype=object)
    url = np.where(rng.random(n) < 0.1, _pick(rng, google, n), _pick(rng, sites, n, skew=0.6))
    titles = np.array([f"Title {i}" for i in range(500)] + [f"Google result {i}" for i in range(50)], dtype=object)
    referers = np.array([f"https://www.ref{i}.ru/path/{j}" for i in range(80) for j in range(5)]
                        + [f"http://ref{i}.com/x" for i in range(40)], dtype=object)
    models = np.array(["iPhone", "iPad", "Galaxy S4", "Lumia 920", "Nexus 4", "HTC One"], dtype=object)
    counter = np.where(rng.random(n) < 0.3, 62, rng.integers(1, 2000, n))
    columns: dict[str, Any] = {
        "WatchID": rng.integers(1, 2**62, n),
        "UserID": _pick(rng, users, n, skew=0.8).astype(np.int64),
        "CounterID": counter,
        "EventTime": np.char.replace(event_time.astype(str), "T", " ").astype(object),
        "EventDate": np.datetime_as_string(base, unit="D").astype(object),
        "AdvEngineID": _mostly(rng, n, 0.93, 0, rng.integers(1, 30, n)),
        "ResolutionWidth": _pick(rng, np.array([800, 1024, 1280, 1366, 1440, 1600, 1920]), n, skew=0.5),
        "ResolutionHeight": _pick(rng, np.array([600, 768, 800, 900, 1080]), n),
        "SearchPhrase": _mostly(rng, n, 0.7, "", _pick(rng, phrases, n, skew=0.9)),
        "MobilePhoneModel": _mostly(rng, n, 0.8, "", _pick(rng, models, n)),
        "MobilePhone": rng.integers(0, 30, n),
        "SearchEngineID": _mostly(rng, n, 0.6, 0, rng.integers(1, 30, n)),
        "RegionID": _pick(rng, np.arange(1, 600), n, skew=0.7),
        "ClientIP": _pick(rng, rng.integers(-2**31, 2**31, max(n // 4, 10)), n, skew=0.5),
        "URL": url,
        "Title": _pick(rng, titles, n, skew=0.5),
        "Referer": _mostly(rng, n, 0.3, "", _pick(rng, referers, n, skew=0.6)),
        "IsRefresh": (rng.random(n) < 0.1).astype(np.int64),
        "DontCountHits": (rng.random(n) < 0.05).astype(np.int64),
        "IsLink": (rng.random(n) < 0.1).astype(np.int64),
        "IsDownload": (rng.random(n) < 0.02).astype(np.int64),
        "TraficSourceID": rng.integers(-1, 10, n),
        "RefererHash": _mostly(rng, n, 0.05, HITS_REFERER_HASH, rng.integers(1, 2**62, n)),
        "URLHash": _mostly(rng, n, 0.05, HITS_URL_HASH, rng.integers(1, 2**62, n)),
        "WindowClientWidth": _pick(rng, np.array([0, 1000, 1263, 1349, 1903]), n),
        "WindowClientHeight": _pick(rng, np.array([0, 600, 657, 880, 955]), n),
    }
    return _typed(Schema.from_json(schema(CLICKBENCH)), columns, n)


# ---- Pinot's compatibility set: mytable (on-time flights) -----------------------------------------------------

CARRIERS = ["AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN"]
AIRLINE_IDS = [19805, 19930, 20409, 19790, 20366, 20436, 20437, 19690, 20398, 20304, 19977, 20355, 21171, 19393]
# Each airport's city market: values the queries compare with among them.
CITY_MARKETS = [30397, 30073, 30721, 30141, 31295, 30194, 31136, 32467, 30977, 31703, 31884, 32211, 32335, 33264,
                33570, 34100, 35991, 32457, 30559, 30436]
AIRPORTS = ["ATL", "BDL", "BOS", "COD", "DEN", "DFW", "DLH", "JFK", "LAX", "LIT", "MLU", "MSN", "MTJ", "ORD",
            "PIH", "RFD", "SEA", "SFO", "SIT", "TUS"]
CITIES = ["Atlanta, GA", "Boston, MA", "Columbus, GA", "Dallas, TX", "Denver, CO", "Grand Rapids, MI",
          "Nashville, TN", "New York, NY", "Nome, AK", "Raleigh/Durham, NC", "Sacramento, CA", "Seattle, WA",
          "State College, PA", "Tucson, AZ"]
STATES = [("AK", "Alaska"), ("AL", "Alabama"), ("AZ", "Arizona"), ("CA", "California"), ("CT", "Connecticut"),
          ("DE", "Delaware"), ("FL", "Florida"), ("LA", "Louisiana"), ("MA", "Massachusetts"), ("ME", "Maine"),
          ("MS", "Mississippi"), ("NH", "New Hampshire"), ("NV", "Nevada"), ("PA", "Pennsylvania"),
          ("RI", "Rhode Island"), ("SD", "South Dakota"), ("TX", "Texas"), ("VI", "Virgin Islands")]
TAILS = ["N130DL", "N16951", "N296WN", "N314US", "N349NW", "N3751B", "N3768", "N393HA", "N397DA", "N3KXAA",
         "N416SW", "N438SW", "N439US", "N472WN", "N4YBAA", "N530MQ", "N636MQ", "N713SK", "N732US", "N786SK",
         "N8315C", "N854AS", "N8612K", "N915DE", "N925DL", "N940DN"]
BLOCKS = [f"{h:02d}00-{h:02d}59" for h in range(6, 24)]
FIRST_DAY = 16071  # 2014-01-01 in days since the epoch


def _mv(rng: np.random.Generator, pool: np.ndarray, n: int, arrow_type: pa.DataType) -> pa.Array:
    """A multi-value column of 1–5 values a row."""
    lengths = rng.integers(1, 6, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pool[rng.integers(0, len(pool), int(offsets[-1]))]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=arrow_type))


def ontime(n: int, seed: int = 1) -> pa.Table:
    from cuvee.testing.compat.queries import PINOT, schema

    rng = np.random.default_rng(seed)
    carrier_ix = rng.integers(0, len(CARRIERS), n)
    carriers = np.array(CARRIERS, dtype=object)[carrier_ix]
    origin_ix, dest_ix = rng.integers(0, len(AIRPORTS), n), rng.integers(0, len(AIRPORTS), n)
    state_o, state_d = rng.integers(0, len(STATES), n), rng.integers(0, len(STATES), n)
    codes = np.array([s[0] for s in STATES], dtype=object)
    names = np.array([s[1] for s in STATES], dtype=object)
    day = rng.integers(0, 31, n)
    distance = rng.integers(50, 3000, n)
    cancelled = (rng.random(n) < 0.05).astype(np.int32)
    dep_delay = np.round(rng.normal(10, 30, n))
    arr_delay = np.round(dep_delay + rng.normal(0, 10, n))
    airports = np.array(AIRPORTS, dtype=object)
    columns: dict[str, Any] = {
        "AirlineID": np.array(AIRLINE_IDS)[carrier_ix], "Carrier": carriers, "UniqueCarrier": carriers,
        "Origin": airports[origin_ix], "Dest": airports[dest_ix],
        "OriginAirportID": 10000 + origin_ix * 37, "DestAirportID": 10000 + dest_ix * 37,
        "OriginAirportSeqID": 1000000 + origin_ix * 3701, "DestAirportSeqID": 1000000 + dest_ix * 3701,
        "OriginCityMarketID": np.array(CITY_MARKETS)[origin_ix], "DestCityMarketID": np.array(CITY_MARKETS)[dest_ix],
        "OriginCityName": _pick(rng, CITIES, n), "DestCityName": _pick(rng, CITIES, n),
        "OriginState": codes[state_o], "DestState": codes[state_d],
        "OriginStateName": names[state_o], "DestStateName": names[state_d],
        "OriginStateFips": 1 + state_o * 3, "DestStateFips": 1 + state_d * 3,
        "OriginWac": 1 + state_o * 5, "DestWac": 1 + state_d * 5,
        "DaysSinceEpoch": FIRST_DAY + day, "DayofMonth": 1 + day, "DayOfWeek": 1 + (day + 2) % 7,
        "FlightDate": np.array([f"2014-01-{d + 1:02d}" for d in range(31)], dtype=object)[day],
        "Year": np.full(n, 2014), "Month": np.ones(n, dtype=np.int32), "Quarter": np.ones(n, dtype=np.int32),
        "FlightNum": rng.integers(1, 7000, n), "Flights": np.ones(n, dtype=np.int32),
        "TailNum": _pick(rng, TAILS, n),
        "DepTime": rng.integers(1, 2400, n), "ArrTime": rng.integers(1, 2400, n),
        "CRSDepTime": rng.integers(500, 2400, n), "CRSArrTime": rng.integers(1, 2400, n),
        "FirstDepTime": rng.integers(1000, 2400, n), "WheelsOn": rng.integers(1, 2400, n),
        "WheelsOff": rng.integers(1, 2400, n),
        "DepTimeBlk": _pick(rng, BLOCKS, n), "ArrTimeBlk": _pick(rng, BLOCKS, n),
        "Distance": distance, "DistanceGroup": 1 + distance // 250,
        "CRSElapsedTime": 30 + distance // 8, "ActualElapsedTime": 25 + distance // 8 + rng.integers(0, 30, n),
        "AirTime": 20 + distance // 8, "TaxiIn": rng.integers(1, 200, n), "TaxiOut": rng.integers(1, 120, n),
        "Cancelled": cancelled,
        "CancellationCode": np.where(cancelled == 1, _pick(rng, ["A", "B", "C"], n), ""),
        "Diverted": (rng.random(n) < 0.03).astype(np.int32),
        "DepDelay": dep_delay, "DepDelayMinutes": np.maximum(dep_delay, 0).astype(np.float32),
        "ArrDelay": arr_delay.astype(np.float32), "ArrDelayMinutes": np.maximum(arr_delay, 0),
        "DepDel15": (dep_delay >= 15).astype(np.int32), "ArrDel15": (arr_delay >= 15).astype(np.int32),
        "DepartureDelayGroups": np.clip(dep_delay // 15, -2, 12).astype(np.int32),
        "ArrivalDelayGroups": np.clip(arr_delay // 15, -2, 12).astype(np.int32),
        "CarrierDelay": rng.integers(0, 120, n), "WeatherDelay": rng.integers(0, 60, n),
        "NASDelay": rng.integers(0, 90, n), "SecurityDelay": rng.integers(0, 10, n),
        "LateAircraftDelay": rng.integers(0, 150, n),
        "LongestAddGTime": rng.integers(0, 100, n), "TotalAddGTime": rng.integers(0, 120, n),
        "DivActualElapsedTime": rng.integers(0, 400, n), "DivAirportLandings": rng.integers(0, 3, n),
        "DivArrDelay": rng.integers(0, 300, n), "DivDistance": rng.integers(0, 500, n),
        "DivReachedDest": rng.integers(0, 2, n),
        # Multi-value pools span the constants Pinot's queries compare them with (airport ids 10000–15000, ground
        # times to 100 minutes, wheel times 1–2400, …), so their filters select rows.
        "DivAirportIDs": _mv(rng, np.arange(10000, 15001), n, pa.int32()),
        "DivAirportSeqIDs": _mv(rng, np.arange(1000000, 1500000, 37), n, pa.int32()),
        "DivAirports": _mv(rng, airports, n, pa.string()),
        "DivLongestGTimes": _mv(rng, np.arange(0, 100, 0.5), n, pa.float32()),
        "DivTailNums": _mv(rng, np.array(TAILS, dtype=object), n, pa.string()),
        "DivTotalGTimes": _mv(rng, np.arange(0, 200), n, pa.int64()),
        "DivWheelsOffs": _mv(rng, np.arange(1, 2400), n, pa.int32()),
        "DivWheelsOns": _mv(rng, np.arange(1, 2400), n, pa.int32()),
        "RandomAirports": _mv(rng, airports, n, pa.string()),
    }
    return _typed(Schema.from_json(schema(PINOT)), columns, n)
