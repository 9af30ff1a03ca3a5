"""The QA kind's built-in dataset: questions about short made-up notes,
written as SQuAD 1.1 JSON (`write_builtin`), so the run reads it with the
same reader as user files. The validation split uses names, places,
colours, days and ages the training split never shows."""

import json
import random

from bertzoo.data.builtin_words import AGES, COLORS, DAYS, PEOPLE, PLACES, name

DESCRIPTION = (
    "questions about short made-up notes (unseen names, places, colours, days and ages in "
    "validation)"
)


def questions(seed=0, train_size=300, validation_size=100):
    """Extractive QA over short made-up notes: each context states four
    facts of different kinds (where someone lives, a colour, a day, an age)
    in random order, and the question asks for one of them. SQuAD-style
    dicts {id, question, context, answer, answer_start}."""
    rng = random.Random(seed)

    def rows(split, n):
        out = []
        for i in range(n):
            person, other = (name(p) for p in rng.sample(PEOPLE[split], 2))
            place = name(rng.choice(PLACES[split]))
            color, day = rng.choice(COLORS[split]), name(rng.choice(DAYS[split]))
            age = str(rng.choice(AGES[split]))
            facts = [
                (f"{person} lives in {place}.", f"Where does {person} live?", place),
                (f"The car is {color}.", "What color is the car?", color),
                (f"The meeting is on {day}.", "When is the meeting?", day),
                (f"{other} is {age} years old.", f"How old is {other}?", age),
            ]
            sentence, question, answer = facts[i % len(facts)]
            rng.shuffle(facts)
            context = " ".join(f[0] for f in facts)
            start = context.index(sentence) + sentence.rindex(answer)
            out.append(
                {
                    "id": f"{('train', 'dev')[split]}-{i}",
                    "question": question,
                    "context": context,
                    "answer": answer,
                    "answer_start": start,
                }
            )
        return out

    return rows(0, train_size), rows(1, validation_size)


def text(rows):
    """One split as a SQuAD 1.1 JSON document, a paragraph per question."""
    data = {
        "version": "1.1",
        "data": [
            {
                "title": "builtin",
                "paragraphs": [
                    {
                        "context": r["context"],
                        "qas": [
                            {
                                "id": r["id"],
                                "question": r["question"],
                                "answers": [
                                    {"text": r["answer"], "answer_start": r["answer_start"]}
                                ],
                            }
                        ],
                    }
                    for r in rows
                ],
            }
        ],
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
