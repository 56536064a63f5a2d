"""$jsonSchema as a query operator and as a collection validator: the
keywords MongoDB supports, its rule that a restriction keyword passes
values of other types, and its parse errors (codes and messages)."""

import pytest
from bson import Decimal128, Int64, ObjectId
from pymongo.errors import OperationFailure, WriteError

DOCS = [
    {"_id": 1, "name": "ann", "age": 34, "tags": ["a", "b"], "addr": {"city": "Oslo", "zip": "0150"}},
    {"_id": 2, "name": "bob", "age": 17.5, "tags": ["a", "a"]},
    {"_id": 3, "name": "c", "age": "old", "tags": []},
    {"_id": 4, "name": 42, "addr": {"city": 7}},
    {"_id": 5, "age": Int64(70), "extra": True},
]


@pytest.fixture
def coll(client):
    client.test.c.insert_many(DOCS)
    return client.test.c


def ids(coll, schema):
    return sorted(d["_id"] for d in coll.find({"$jsonSchema": schema}))


@pytest.mark.parametrize(
    "schema, expected",
    [
        ({}, [1, 2, 3, 4, 5]),
        ({"required": ["name", "age"]}, [1, 2, 3]),
        ({"properties": {"name": {"bsonType": "string"}}}, [1, 2, 3, 5]),
        ({"properties": {"name": {"type": "string", "minLength": 3}}}, [1, 2, 5]),
        ({"properties": {"age": {"minimum": 18}}}, [1, 3, 4, 5]),  # "old" is not a number: passes
        ({"properties": {"age": {"bsonType": "number", "minimum": 18, "maximum": 70, "exclusiveMaximum": True}}},
         [1, 4]),
        ({"properties": {"age": {"bsonType": ["int", "long"]}}}, [1, 4, 5]),
        ({"properties": {"name": {"enum": ["ann", "c", 42]}}}, [1, 3, 4, 5]),
        ({"properties": {"name": {"pattern": "^[ab]"}}}, [1, 2, 4, 5]),
        ({"properties": {"tags": {"minItems": 1, "uniqueItems": True}}}, [1, 4, 5]),
        ({"properties": {"tags": {"items": {"enum": ["a"]}}}}, [2, 3, 4, 5]),
        ({"properties": {"addr": {"required": ["zip"], "properties": {"city": {"bsonType": "string"}}}}}, [1, 2, 3, 5]),
        ({"properties": {"_id": {}, "name": {}, "age": {}, "tags": {}, "addr": {}}, "additionalProperties": False},
         [1, 2, 3, 4]),
        ({"patternProperties": {"^a": {"bsonType": "number"}}}, [2, 5]),  # "addr" starts with "a" too
        ({"minProperties": 4}, [1, 2, 3]),
        ({"maxProperties": 3}, [4, 5]),
        ({"dependencies": {"extra": ["age"], "addr": {"required": ["tags"]}}}, [1, 2, 3, 5]),
        ({"anyOf": [{"required": ["addr"]}, {"required": ["extra"]}]}, [1, 4, 5]),
        ({"oneOf": [{"required": ["addr"]}, {"required": ["tags"]}]}, [2, 3, 4]),
        ({"not": {"required": ["tags"]}}, [4, 5]),
        ({"allOf": [{"required": ["tags"]}, {"properties": {"age": {"bsonType": "double"}}}]}, [2]),
        ({"properties": {"age": {"multipleOf": 17}}}, [1, 3, 4]),
        ({"bsonType": "object"}, [1, 2, 3, 4, 5]),
        ({"type": "array"}, []),
    ],
)
def test_find_with_json_schema(coll, schema, expected):
    assert ids(coll, schema) == expected


def test_json_schema_combines_with_other_conditions(coll):
    got = sorted(d["_id"] for d in coll.find({"$or": [{"$jsonSchema": {"required": ["extra"]}}, {"_id": 1}]}))
    assert got == [1, 5]
    assert coll.count_documents({"$jsonSchema": {"required": ["addr"]}, "_id": {"$gt": 1}}) == 1


def test_a_json_schema_validator_refuses_documents_that_fail_it(client):
    schema = {
        "bsonType": "object",
        "required": ["sku", "qty"],
        "properties": {
            "sku": {"bsonType": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
            "qty": {"bsonType": ["int", "long"], "minimum": 0},
            "price": {"bsonType": ["double", "decimal"]},
            "status": {"enum": ["new", "sold"]},
        },
    }
    db = client.test
    db.create_collection("items", validator={"$jsonSchema": schema})
    db.items.insert_one({"sku": "ABC-1", "qty": 3, "price": 9.5, "status": "new"})
    db.items.insert_one({"sku": "XYZ-22", "qty": Int64(0), "price": Decimal128("1.10")})
    for bad in [{"sku": "ABC-1"}, {"sku": "abc-1", "qty": 1}, {"sku": "ABC-1", "qty": -1},
                {"sku": "ABC-1", "qty": 1.5}, {"sku": "ABC-1", "qty": 1, "status": "lost"}]:
        with pytest.raises(WriteError) as e:
            db.items.insert_one(bad)
        assert e.value.code == 121 and e.value.details["errmsg"] == "Document failed validation"
    with pytest.raises(WriteError) as e:
        db.items.update_one({"sku": "ABC-1"}, {"$set": {"qty": -5}})
    assert e.value.code == 121
    assert db.items.count_documents({}) == 2 and db.items.find_one({"sku": "ABC-1"})["qty"] == 3
    opts = db.items.options()
    assert opts["validator"] == {"$jsonSchema": schema}


@pytest.mark.parametrize(
    "schema, code, errmsg",
    [
        ({"frob": 1}, 9, "Unknown $jsonSchema keyword: frob"),
        ({"format": "email"}, 9, "$jsonSchema keyword 'format' is not currently supported"),
        ({"properties": {"a": {"$ref": "#/x"}}}, 9, "$jsonSchema keyword '$ref' is not currently supported"),
        ({"type": "object", "bsonType": "object"}, 9,
         "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'"),
        ({"exclusiveMinimum": True}, 9, "$jsonSchema keyword 'minimum' must be a present if exclusiveMinimum is present"),
        ({"required": []}, 9, "$jsonSchema keyword 'required' cannot be an empty array"),
        ({"required": "a"}, 14, "$jsonSchema keyword 'required' must be an array"),
        ({"minimum": "a"}, 14, "$jsonSchema keyword 'minimum' must be a number"),
        ({"properties": {"a": 1}}, 14, "Nested schema for $jsonSchema property 'a' must be an object"),
        ({"bsonType": 5}, 14, "$jsonSchema keyword 'bsonType' must be either a string or an array of strings"),
        ({"multipleOf": 0}, 9, "$jsonSchema keyword 'multipleOf' must have a positive value"),
        ({"title": 1}, 14, "$jsonSchema keyword 'title' must be of type string"),
        ({"enum": []}, 9, "$jsonSchema keyword 'enum' cannot be an empty array"),
        ({"anyOf": []}, 2, "$jsonSchema keyword 'anyOf' must be a non-empty array"),
    ],
)
def test_bad_schemas_are_refused(client, schema, code, errmsg):
    with pytest.raises(OperationFailure) as e:
        list(client.test.c.find({"$jsonSchema": schema}))
    assert (e.value.code, e.value.details["errmsg"]) == (code, errmsg)
    with pytest.raises(OperationFailure) as e:
        client.test.create_collection("v", validator={"$jsonSchema": schema})
    assert e.value.code == code
    assert "v" not in client.test.list_collection_names()


def test_json_schema_must_be_an_object(client):
    with pytest.raises(OperationFailure) as e:
        list(client.test.c.find({"$jsonSchema": [ObjectId()]}))
    assert e.value.code == 14
