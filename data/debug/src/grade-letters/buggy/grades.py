"""Letter grades from exam scores."""

CUTOFFS = [(90, "A"), (80, "B"), (70, "C"), (60, "D")]


def letter_grade(score):
    """The letter of a score from 0 to 100."""
    if not 0 <= score <= 100:
        raise ValueError(f"score out of range: {score}")
    for cutoff, letter in CUTOFFS:
        if score > cutoff:
            return letter
    return "F"


def grade_counts(scores):
    """How many scores got each letter (every letter present, zero counts included)."""
    counts = {letter: 0 for letter in "ABCDF"}
    for score in scores:
        counts[letter_grade(score)] += 1
    return counts
