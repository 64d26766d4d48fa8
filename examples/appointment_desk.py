"""A tool-using voice bot: the appointment desk of a dental clinic, over a local SQLite file.

    python examples/appointment_desk.py                 # serve it: open the printed URL, click Talk
    cadence serve --bot examples/appointment_desk.py    # the same
    cadence talk --bot examples/appointment_desk.py caller.wav

The diary lives in ``$APPOINTMENTS_DB`` (default ``appointments.sqlite`` here), created with a
week of free slots on first use. The embedded 135M model cannot phrase tool results, so the
tools answer with ``Say(...)`` (spoken as is); with a larger model (``llm.base_url`` of a vLLM
server) plain return values work too and the model words the answer.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Literal

from agent.bot import Bot, Say

Day = Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
TIMES = ["9 am", "10 am", "11 am", "2 pm", "3 pm", "4 pm"]


def diary() -> sqlite3.Connection:
    """The diary, created with every slot free the first time."""
    path = Path(os.environ.get("APPOINTMENTS_DB", "appointments.sqlite"))
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS slots (day TEXT, time TEXT, patient TEXT, PRIMARY KEY (day, time))")
    if db.execute("SELECT COUNT(*) FROM slots").fetchone()[0] == 0:
        db.executemany("INSERT INTO slots VALUES (?, ?, NULL)",
                       [(d, t) for d in Day.__args__ for t in TIMES])  # type: ignore[attr-defined]
        db.commit()
    return db


bot = Bot(
    "You are the appointment desk of the Riverside dental clinic, on the phone. Use check_availability "
    "when the caller names a day, book_appointment to book. Answer in one short sentence.",
    greeting="Riverside dental clinic, how can I help?",
    hang_up_tool=True,
)


@bot.tool(filler="Let me look at the diary.")
def check_availability(day: Day) -> Say:
    """Free appointment times on a weekday.

    Args:
        day: the weekday the caller wants
    """
    with diary() as db:
        free = [t for (t,) in db.execute("SELECT time FROM slots WHERE day = ? AND patient IS NULL ORDER BY rowid", (day,))]
    if not free:
        return Say(f"Sorry, {day} is fully booked.")
    return Say(f"On {day} we have {', '.join(free[:-1])} and {free[-1]} free." if len(free) > 1
               else f"On {day} we have {free[0]} free.")


@bot.tool
def book_appointment(day: Day, time: Literal["9 am", "10 am", "11 am", "2 pm", "3 pm", "4 pm"],
                     name: str) -> Say:
    """Book a free slot for the caller.

    Args:
        day: the weekday
        time: the time of the slot
        name: the caller's name
    """
    with diary() as db:
        booked = db.execute("UPDATE slots SET patient = ? WHERE day = ? AND time = ? AND patient IS NULL",
                            (name, day, time)).rowcount
    if not booked:
        return Say(f"Sorry, {day} at {time} is taken.")
    return Say(f"You are booked for {day} at {time}, {name}.")


if __name__ == "__main__":
    bot.run()
