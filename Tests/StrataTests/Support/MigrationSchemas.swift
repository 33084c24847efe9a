import Foundation
import LibraryModel
import Testing
@testable import Strata

/// A small "shop" model in three versions: v2 uses every declarative migration step kind and a
/// custom one (`splitName`, in ``registry``), v3 changes a type again and removes a unique.
enum ShopSchemas {
    static let v1 = #"""
    {"model":"shop","version":1,"entities":[
      {"name":"Product","attributes":[
         {"name":"code","type":"string"},{"name":"title","type":"string"},{"name":"price","type":"double"},
         {"name":"stock","type":"int","optional":true},{"name":"legacy","type":"bool","optional":true},
         {"name":"fullName","type":"string","optional":true}],
       "relationships":[{"name":"maker","destination":"Maker","inverse":"products"}],
       "uniques":[["code"]],"indexes":[["price"]]},
      {"name":"Maker","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"products","destination":"Product","toMany":true,"inverse":"maker"}]}
    ]}
    """#

    /// Every declarative step kind plus a custom one.
    static let v2 = #"""
    {"model":"shop","version":2,"entities":[
      {"name":"Item","attributes":[
         {"name":"code","type":"string"},{"name":"name","type":"string"},{"name":"price","type":"int"},
         {"name":"stock","type":"int","optional":true},{"name":"fullName","type":"string","optional":true},
         {"name":"first","type":"string","optional":true},{"name":"last","type":"string","optional":true},
         {"name":"views","type":"int","default":7}],
       "relationships":[{"name":"brand","destination":"Maker","inverse":"products"}],
       "uniques":[["code"],["name"]],"indexes":[["stock"]]},
      {"name":"Maker","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"products","destination":"Item","toMany":true,"inverse":"brand"}]}
    ],
    "migration":{"steps":[
      {"op":"renameEntity","from":"Product","to":"Item"},
      {"op":"renameAttribute","entity":"Item","from":"title","to":"name"},
      {"op":"renameRelationship","entity":"Item","from":"maker","to":"brand"},
      {"op":"changeType","entity":"Item","attribute":"price","conversion":"doubleToInt"},
      {"op":"removeAttribute","entity":"Item","attribute":"legacy"},
      {"op":"addAttribute","entity":"Item","attribute":"views"},
      {"op":"addAttribute","entity":"Item","attribute":"first"},
      {"op":"addAttribute","entity":"Item","attribute":"last"},
      {"op":"custom","entity":"Item","name":"splitName"},
      {"op":"removeIndex","entity":"Item","attributes":["price"]},
      {"op":"addIndex","entity":"Item","attributes":["stock"]},
      {"op":"addUnique","entity":"Item","attributes":["name"]}
    ]}}
    """#

    static let v3 = #"""
    {"model":"shop","version":3,"entities":[
      {"name":"Item","attributes":[
         {"name":"code","type":"string"},{"name":"name","type":"string"},{"name":"price","type":"string"},
         {"name":"stock","type":"int","optional":true},{"name":"fullName","type":"string","optional":true},
         {"name":"first","type":"string","optional":true},{"name":"last","type":"string","optional":true},
         {"name":"views","type":"int","default":7}],
       "relationships":[{"name":"brand","destination":"Maker","inverse":"products"}],
       "uniques":[["name"]],"indexes":[["stock"]]},
      {"name":"Maker","attributes":[{"name":"name","type":"string"}],
       "relationships":[{"name":"products","destination":"Item","toMany":true,"inverse":"brand"}]}
    ],
    "migration":{"steps":[{"op":"changeType","entity":"Item","attribute":"price","conversion":"intToString"},
                          {"op":"removeUnique","entity":"Item","attributes":["code"]}]}}
    """#

    static var registry: MigrationRegistry {
        var r = MigrationRegistry()
        r.register("splitName") { record in
            guard case .string(let full) = record["fullName"] else { return }
            let parts = full.split(separator: " ", maxSplits: 1).map(String.init)
            record["first"] = .string(parts[0])
            if parts.count > 1 { record["last"] = .string(parts[1]) }
        }
        return r
    }
}

/// A "lab" model in two versions whose migration renames, converts, removes and adds.
enum LabSchemas {
    static let v1 = #"""
    {"model":"lab","version":1,"entities":[
      {"name":"Sample","attributes":[
         {"name":"label","type":"string"},{"name":"weight","type":"double","optional":true},
         {"name":"batch","type":"int","optional":true},{"name":"gone","type":"string","optional":true},
         {"name":"kept","type":"bool","optional":true}],
       "uniques":[["label"]],"indexes":[["weight"],["batch","label"]]}
    ]}
    """#
    static let v2 = #"""
    {"model":"lab","version":2,"entities":[
      {"name":"Specimen","attributes":[
         {"name":"name","type":"string"},{"name":"weight","type":"int","optional":true},
         {"name":"batch","type":"string","optional":true},{"name":"kept","type":"bool","optional":true},
         {"name":"views","type":"int","default":7},{"name":"note","type":"string","optional":true}],
       "uniques":[["name"]],"indexes":[["batch","name"]]}
    ],
    "migration":{"steps":[
      {"op":"renameEntity","from":"Sample","to":"Specimen"},
      {"op":"renameAttribute","entity":"Specimen","from":"label","to":"name"},
      {"op":"changeType","entity":"Specimen","attribute":"weight","conversion":"doubleToInt"},
      {"op":"changeType","entity":"Specimen","attribute":"batch","conversion":"intToString"},
      {"op":"removeIndex","entity":"Specimen","attributes":["weight"]},
      {"op":"removeAttribute","entity":"Specimen","attribute":"gone"},
      {"op":"addAttribute","entity":"Specimen","attribute":"views"},
      {"op":"addAttribute","entity":"Specimen","attribute":"note"}
    ]}}
    """#
}

/// ``LabSchemas`` v1 and v2, parsed.
func labSchemas() throws -> [Schema] {
    [try Schema.parse(Array(LabSchemas.v1.utf8), source: "v1.json", expectedVersion: 1),
     try Schema.parse(Array(LabSchemas.v2.utf8), source: "v2.json", expectedVersion: 2)]
}
