"""Why a write fails validation: `errInfo.details`, as mongod explains it
(operator, what was specified, the reason, the values considered), through
insert, update and findAndModify, and in the warn log."""

import pytest
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure, WriteError


def test_insert_update_and_find_and_modify_explain_the_failure(client):
    db = client.test
    db.create_collection("c", validator={"qty": {"$gte": 0}, "name": {"$type": "string"}})
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"_id": 1, "qty": -1, "name": 5})
    info = e.value.details["errInfo"]
    assert info == {"failingDocumentId": 1, "details": {"operatorName": "$and", "clausesNotSatisfied": [
        {"index": 0, "details": {"operatorName": "$gte", "specifiedAs": {"qty": {"$gte": 0}},
                                 "reason": "comparison failed", "consideredValue": -1}},
        {"index": 1, "details": {"operatorName": "$type", "specifiedAs": {"name": {"$type": "string"}},
                                 "reason": "type did not match", "consideredValue": 5, "consideredType": "int"}},
    ]}}
    db.c.insert_one({"_id": 2, "qty": 1, "name": "a"})
    with pytest.raises(WriteError) as e:
        db.c.update_one({"_id": 2}, {"$unset": {"name": 1}})
    clauses = e.value.details["errInfo"]["details"]["clausesNotSatisfied"]
    assert clauses == [{"index": 1, "details": {"operatorName": "$type", "specifiedAs": {"name": {"$type": "string"}},
                                                "reason": "field was missing"}}]
    with pytest.raises(OperationFailure) as e:
        db.c.find_one_and_update({"_id": 2}, {"$set": {"qty": [-1, -2]}}, return_document=ReturnDocument.AFTER)
    assert e.value.code == 121
    first = e.value.details["errInfo"]["details"]["clausesNotSatisfied"][0]["details"]
    assert first["consideredValues"] == [-1, -2]
    assert db.c.find_one({"_id": 2}) == {"_id": 2, "qty": 1, "name": "a"}


def test_json_schema_rules(client):
    db = client.test
    db.create_collection("s", validator={"$jsonSchema": {
        "bsonType": "object", "required": ["name", "year"], "title": "Student",
        "properties": {
            "name": {"bsonType": "string"},
            "year": {"bsonType": "int", "minimum": 2017, "description": "2017 or later"},
        },
    }})
    with pytest.raises(WriteError) as e:
        db.s.insert_one({"_id": 1, "year": 2016})
    assert e.value.details["errInfo"]["details"] == {
        "operatorName": "$jsonSchema", "title": "Student", "schemaRulesNotSatisfied": [
            {"operatorName": "properties", "propertiesNotSatisfied": [
                {"propertyName": "year", "description": "2017 or later", "details": [
                    {"operatorName": "minimum", "specifiedAs": {"minimum": 2017}, "reason": "comparison failed",
                     "consideredValue": 2016}]}]},
            {"operatorName": "required", "specifiedAs": {"required": ["name", "year"]},
             "missingProperties": ["name"]},
        ]}


def test_warn_logs_the_details_and_writes(server, client):
    db = client.test
    db.create_collection("w", validator={"n": {"$lt": 10}}, validationAction="warn")
    db.w.insert_one({"_id": 7, "n": 12})
    assert db.w.find_one({"_id": 7}) == {"_id": 7, "n": 12}
    log = server.log.read_text()
    assert "Document would fail validation" in log and "comparison failed" in log
