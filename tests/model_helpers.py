"""What the model tests share."""

import dataclasses


def every_call(recipe_name: str):
    """The named recipe with a precision policy that quantizes every block and step (the tiny models have one or
    two blocks and steps, which the recipes' own policies keep in 16 bit)."""
    from lowbit_video.recipes import PrecisionPolicy, load_recipe

    return dataclasses.replace(load_recipe(recipe_name), policy=PrecisionPolicy())
